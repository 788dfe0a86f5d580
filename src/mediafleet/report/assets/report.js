// mediafleet report: draws the evidence of one bundle from the JSON in #mf-data. No network, no
// libraries. Every locus is one element carrying data-locus (its id) and data-kind, placed in
// fractions of its page or time line, so it lands on its coordinates at any size.
// Hash flags: #all draws every page at once (as printing does); #measure also writes each locus's
// drawn position back in the artifact's units (data-drawn), which the tests read; #locus=<id> opens
// that locus (a link to one piece of evidence).
"use strict";
(function () {
  const D = JSON.parse(document.getElementById("mf-data").textContent);
  const flags = new Set(location.hash.replace(/^#/, "").split(",").filter(Boolean));
  const wanted = Array.from(flags).find((f) => f.startsWith("locus="));
  const byId = new Map();
  const root = document.getElementById("mf-report");
  const pending = [];

  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === null || v === undefined) continue;
      if (k === "class") e.className = v;
      else if (k === "text") e.textContent = v;
      else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
      else e.setAttribute(k, v);
    }
    for (const kid of kids) if (kid) e.append(kid);
    return e;
  }
  const blob = (id) => (id ? document.getElementById(id).textContent : null);
  const pct = (v, of) => (100 * v / of) + "%";
  const ms = (v) => (v / 1000).toFixed(3) + " s";
  const conf = (c) => (c === undefined ? "" : " · confidence " + c.toFixed(2));
  // One colour per speaker label (S1, S2, ...), dark enough for white text; the palette repeats after eight.
  const SPEAKER_COLOURS = ["#1f5fa8", "#b3261e", "#1f7a3a", "#7b3fa0", "#b35c00", "#6d4c41", "#ad1457", "#00838f"];
  const speakerColour = (s) => (typeof s === "string" && /^S[1-9][0-9]?$/.test(s)) ? SPEAKER_COLOURS[(parseInt(s.slice(1), 10) - 1) % SPEAKER_COLOURS.length] : null;
  const short = (d) => (d ? d.slice(0, 19) + "…" : "");

  function hover(locus) {
    const a = locus.address;
    const where = a.kind.endsWith("region") && a.kind !== "page_region" ? `${a.x.toFixed(1)}, ${a.y.toFixed(1)}, ${a.width.toFixed(1)} × ${a.height.toFixed(1)}` : "";
    return [locus.text || locus.kind, where + conf(locus.confidence), locus.id].filter(Boolean).join("\n");
  }

  // One panel shows the locus last clicked: every field, selectable.
  const info = el("aside", { id: "mf-info", class: "info", hidden: "" });
  function show(locus) {
    info.replaceChildren(el("button", { class: "close", text: "×", onclick: () => info.setAttribute("hidden", "") }),
      el("h3", { text: locus.kind }));
    const dl = el("dl");
    const rows = [["locus id", locus.id], ...Object.entries(locus.address).filter(([k]) => k !== "kind")];
    for (const k of ["text", "confidence", "path", "ocr_reason", "page", "shot", "segment", "speaker", "time_ms", "language", "phash", "sharpness", "near_duplicate_of_frame", "coordinate_space", "timeline"])
      if (locus[k] !== undefined) rows.push([k, locus[k]]);
    for (const [k, v] of rows) dl.append(el("dt", { text: k }), el("dd", { text: String(v) }));
    info.append(dl);
    info.removeAttribute("hidden");
  }
  function mark(e, locus, extra) {
    byId.set(locus.id, locus);
    e.dataset.locus = locus.id;
    e.dataset.kind = locus.kind;
    e.title = hover(locus);
    e.addEventListener("click", (ev) => { ev.stopPropagation(); show(locus); if (extra) extra(); });
    return e;
  }

  // ----- header -----
  const A = D.artifact;
  const kinds = Object.entries(D.kinds).map(([k, n]) => `${n} ${k}`).join(", ") || "no loci";
  root.append(el("header", {},
    el("h1", { text: D.title }),
    el("p", { class: "facts" },
      el("span", { class: "status " + D.status, text: D.status }),
      ` ${A.media_type || "unknown type"} · ${A.bytes.toLocaleString("en")} bytes · ${D.action || "no action"} · ${kinds}`),
    el("p", { class: "ids", text: `artifact ${A.digest} · job ${D.job_id}` })));
  if (D.error) root.append(el("section", { class: "error" },
    el("h2", { text: "The job failed" }), el("p", { text: `${D.error.code}: ${D.error.message}` + (D.error.retryable ? " (retryable)" : "") })));
  if (D.status === "ok" && !D.artifact_available)
    root.append(el("p", { class: "note", text: "The artifact was not available when this report was made: the loci are drawn on blank pages and time lines." }));

  // ----- pages (PDF) and images: boxes in fractions of the page -----
  function sheet(page, w, h, unit) {
    const s = el("div", { class: "sheet", style: `aspect-ratio: ${w} / ${h}`, "data-w": w, "data-h": h, "data-unit": unit });
    mark(s, page.region);
    return s;
  }
  function fillPage(page, s) {
    if (s.dataset.drawn) return;
    s.dataset.drawn = "1";
    const w = +s.dataset.w, h = +s.dataset.h;
    if (page.image) s.append(el("img", { src: blob(page.image), alt: `page ${page.page}` }));
    for (const box of page.boxes) {
      const a = box.address;
      const kind = box.path === "ocr" ? "ocr" : (box.region === "text_line" ? "ocr" : "textlayer");
      s.append(mark(el("div", { class: "box " + kind, style: `left:${pct(a.x, w)};top:${pct(a.y, h)};width:${pct(a.width, w)};height:${pct(a.height, h)}` }), box));
    }
  }
  function pages(list, unit, label) {
    const wrap = el("section", { class: "pages" });
    wrap.append(el("div", { class: "legend" },
      el("span", { class: "swatch textlayer" }), " text-layer line ",
      el("span", { class: "swatch ocr" }), " OCR line (recognised from pixels) · hover a box for its text, click for every field"));
    for (const page of list) {
      const a = page.region.address;
      const w = a.width, h = a.height;
      const s = sheet(page, w, h, unit);
      const head = `${label} ${page.page} · ${w.toFixed(0)} × ${h.toFixed(0)} ${unit}` +
        (page.region.path ? ` · ${page.region.path === "ocr" ? "OCR" : "text layer"}` : "") +
        (page.region.ocr_reason ? ` (${page.region.ocr_reason})` : "") + ` · ${page.boxes.length} lines`;
      const fig = el("figure", { class: "page", "data-page": page.page }, el("figcaption", { text: head }), s);
      if (page.text) {
        const t = page.text;
        fig.append(el("details", {}, el("summary", { text: `page text: characters ${t.address.start}–${t.address.end} of the document` }),
          mark(el("div", { class: "text", "data-start": t.address.start, "data-end": t.address.end, text: t.text || "" }), t)));
      }
      wrap.append(fig);
      pending.push(() => fillPage(page, s));
      s._fill = () => fillPage(page, s);
    }
    root.append(wrap);
  }

  // ----- time lines (audio, video): ranges in fractions of the duration -----
  function track(name, duration) {
    const t = el("div", { class: "track " + name, "data-duration": duration });
    return t;
  }
  function timeline(V) {
    const dur = V.duration_ms;
    const sec = el("section", { class: "timeline" });
    let player = null;
    if (V.player) {
      player = el(V.video ? "video" : "audio", { controls: "", preload: "metadata", src: blob(V.player) });
      const k = V.keyframes[0];  // the frame size, so the player has its shape before the video loads
      if (V.video && k && k.width && k.height) player.style.aspectRatio = `${k.width} / ${k.height}`;
      sec.append(player);
    } else if (V.player_note) sec.append(el("p", { class: "note", text: "No player: " + V.player_note + "." }));
    let stopAt = null;
    const heads = [];
    function play(startMs, endMs) {
      if (!player) return;
      player.currentTime = startMs / 1000;
      stopAt = endMs === undefined ? null : endMs / 1000;
      player.play().catch(() => {});
    }
    if (player) player.addEventListener("timeupdate", () => {
      if (stopAt !== null && player.currentTime >= stopAt) { player.pause(); stopAt = null; }
      for (const h of heads) h.style.left = pct(Math.min(player.currentTime * 1000, dur), dur);
    });
    const scale = el("div", { class: "scale" });
    const step = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 1800, 3600].find((s) => dur / 1000 / s <= 12) || 7200;
    for (let s = 0; s * 1000 <= dur; s += step) scale.append(el("span", { class: s > 0 && s * 1000 > dur * 0.95 ? "end" : null, style: `left:${pct(s * 1000, dur)}`, text: s >= 60 ? `${Math.floor(s / 60)}:${String(s % 60).padStart(2, "0")}` : `${s} s` }));
    function withHead(t) { const h = el("div", { class: "head" }); heads.push(h); t.append(h); return t; }
    if (V.video) {
      const shots = withHead(track("shots", dur));
      V.shots.forEach((shot, i) => {
        const a = shot.address;
        shots.append(mark(el("div", { class: "range shot s" + (i % 2), style: `left:${pct(a.start_ms, dur)};width:${pct(a.end_ms - a.start_ms, dur)}`, text: "shot " + shot.shot }), shot, () => play(a.start_ms)));
      });
      for (const key of V.keyframes) {
        shots.append(mark(el("div", { class: "frame", style: `left:${pct(key.time_ms || 0, dur)}`, "data-frame": key.address.start_frame }), key, () => play(key.time_ms || 0)));
      }
      const n = (k, one) => `${k} ${one}${k === 1 ? "" : "s"}`;
      sec.append(el("h2", { text: `${n(V.shots.length, "shot")}, ${n(V.keyframes.length, "keyframe")}` }), scale, shots);
      const strip = el("div", { class: "strip" });
      for (const key of V.keyframes) {
        const cap = `shot ${key.shot} · frame ${key.address.start_frame} · ${ms(key.time_ms || 0)}` + (key.near_duplicate_of_frame ? ` · repeats frame ${key.near_duplicate_of_frame}` : "");
        strip.append(el("figure", { class: "thumb", onclick: () => { show(key); play(key.time_ms || 0); } },
          key.image ? el("img", { src: blob(key.image), alt: cap }) : el("div", { class: "noimg", text: "no image" }),
          el("figcaption", { text: cap })));
      }
      sec.append(strip);
    }
    if (V.video && !V.segments.length && !V.wave.length) {
      sec.append(el("p", { class: "note", text: "No speech: the video has no audio track, or no words were heard in it." }));
      root.append(sec);
      return;
    }
    const speech = withHead(track("speech", dur));
    if (V.wave.length) {
      const ns = "http://www.w3.org/2000/svg";
      const svg = document.createElementNS(ns, "svg");
      const span = V.wave_ms / dur;
      svg.setAttribute("viewBox", `0 0 ${V.wave.length} 100`);
      svg.setAttribute("preserveAspectRatio", "none");
      svg.setAttribute("class", "wave");
      svg.style.width = pct(span * 100, 100);
      const path = document.createElementNS(ns, "path");
      path.setAttribute("d", V.wave.map((v, i) => `M${i + 0.5} ${50 - v * 48}V${50 + v * 48}`).join(""));
      svg.append(path);
      speech.append(svg);
    }
    for (const seg of V.segments) {
      const a = seg.address;
      const c = speakerColour(seg.speaker);
      const tint = c ? `;background:${c}59;border-color:${c}` : "";
      speech.append(mark(el("div", { class: "range segment", style: `left:${pct(a.start_ms, dur)};width:${pct(a.end_ms - a.start_ms, dur)}${tint}` }), seg, () => play(a.start_ms, a.end_ms)));
    }
    const voices = [...new Set(V.segments.map((seg) => seg.speaker).filter(Boolean))];
    const who = voices.length ? `, ${voices.length} speaker${voices.length === 1 ? "" : "s"}` : "";
    sec.append(el("h2", { text: V.segments.length ? `Transcript: ${V.segments.length} segment${V.segments.length === 1 ? "" : "s"}${who}` : (V.video ? "No speech transcribed" : "No speech found") }));
    if (voices.length) sec.append(el("p", { class: "speakers" }, ...voices.map((s) => el("span", { class: "speaker", style: `background:${speakerColour(s)}`, text: s }))));
    if (!V.video) sec.append(scale);
    sec.append(speech);
    const list = el("ol", { class: "transcript" });
    for (const seg of V.segments) {
      const a = seg.address;
      list.append(el("li", { onclick: () => { show(seg); play(a.start_ms, a.end_ms); } },
        el("span", { class: "when", text: `${ms(a.start_ms)} – ${ms(a.end_ms)}` }), " ",
        ...(seg.speaker ? [el("span", { class: "speaker", style: `background:${speakerColour(seg.speaker)}`, text: seg.speaker }), " "] : []),
        el("span", { text: seg.text || "" }),
        el("span", { class: "conf", text: conf(seg.confidence) })));
    }
    sec.append(list);
    root.append(sec);
  }

  if (D.modality === "pdf" && D.view.pages) pages(D.view.pages, "pt", "page");
  else if (D.modality === "image" && D.view.pages) pages(D.view.pages, "px", "image page");
  else if (D.view.duration_ms) timeline(D.view);

  // ----- provenance and the claim's checks -----
  const P = D.provenance;
  const prov = el("section", { class: "prov" }, el("h2", { text: "Provenance" }));
  const table = (rows) => { const t = el("table"); for (const [k, v] of rows) if (v !== null && v !== undefined) t.append(el("tr", {}, el("th", { text: k }), el("td", { text: String(v) }))); return t; };
  const act = P.activity;
  const took = act.startedAtTime && act.endedAtTime ? ((Date.parse(act.endedAtTime) - Date.parse(act.startedAtTime)) / 1000).toFixed(2) + " s" : null;
  prov.append(el("h3", { text: "Activity" }), table([["id", act.id], ["action", act.action], ["status", act.status], ["sidecar / tool", act.sidecar ? `${act.sidecar} / ${act.tool}` : null], ["started", act.startedAtTime], ["ended", act.endedAtTime], ["took", took], ["loci", act.locusCount], ["error", act.error_code]]));
  const ag = P.agent;
  prov.append(el("h3", { text: "Software agent" }), table([["extractor", ag.extractor ? `${ag.extractor} ${ag.extractorVersion}` : "mediafleet (the request was refused before any extractor ran)"], ["engine", ag.engine ? `${ag.engine} ${ag.engineVersion}` : null]]));
  if (P.models.length) prov.append(el("h3", { text: "Models" }), table(P.models.map((m) => [m.name, m.digest])));
  if (P.claim) {
    const c = P.claim;
    prov.append(el("h3", { text: `Claim: ${c.is_verified ? "verified" : "not verified"}` }),
      table([["id", c.id], ["type", c.claim_type], ["confidence", c.confidence !== undefined ? Number(c.confidence).toFixed(3) : null], ["supported by", `${c.locus_count} loci`]]));
    const why = { digest_recomputed: "the worker re-hashed the bytes it read", locus_kinds_declared: "the manifest allows every locus kind produced", loci_valid: "every address passes the engine's rules and lies inside the artifact" };
    const ul = el("ul", { class: "checks" });
    for (const [k, ok] of Object.entries(c.checks || {})) ul.append(el("li", { class: ok ? "pass" : "fail", text: `${ok ? "✓" : "✗"} ${k}: ${why[k] || ""}` }));
    prov.append(ul);
  } else prov.append(el("p", { class: "note", text: "No claim: a failed job makes none." }));
  const types = Object.entries(P.prov_types).map(([k, n]) => `${n} ${k}`).join(", ");
  prov.append(el("p", { class: "ids", text: `PROV-O graph (JSON-LD in the bundle): ${types}` }));
  root.append(prov, info);
  root.append(el("footer", { text: `mediafleet report · ${D.generated_at} · self-contained: nothing is loaded from the network` }));

  // ----- lazy drawing of pages -----
  const sheets = Array.from(document.querySelectorAll(".sheet"));
  const drawAll = () => { for (const s of sheets) s._fill && s._fill(); };
  if (flags.has("all") || flags.has("measure") || wanted || !("IntersectionObserver" in window)) drawAll();
  else {
    const io = new IntersectionObserver((entries) => {
      for (const en of entries) if (en.isIntersecting) { en.target._fill && en.target._fill(); io.unobserve(en.target); }
    }, { rootMargin: "1500px 0px" });
    for (const s of sheets) io.observe(s);
    window.addEventListener("beforeprint", drawAll);
  }

  // ----- #measure: where each locus was drawn, in the artifact's units -----
  if (flags.has("measure")) {
    // Positions are relative to the frame's padding box (where absolute children are placed).
    const inner = (f) => { const b = f.getBoundingClientRect(); return { left: b.left + f.clientLeft, top: b.top + f.clientTop, width: f.clientWidth, height: f.clientHeight }; };
    let n = 0;
    for (const e of document.querySelectorAll("[data-locus]")) {
      const kind = e.dataset.kind, b = e.getBoundingClientRect();
      let drawn, per;
      if (e.classList.contains("sheet")) {
        const w = +e.dataset.w;
        per = w / b.width;
        drawn = [0, 0, w, b.height * per];
      } else if (e.classList.contains("box")) {
        const f = e.closest(".sheet"), fb = inner(f);
        const sx = +f.dataset.w / fb.width, sy = +f.dataset.h / fb.height;
        per = Math.max(sx, sy);
        drawn = [(b.left - fb.left) * sx, (b.top - fb.top) * sy, b.width * sx, b.height * sy];
      } else if (e.closest(".track")) {
        const f = e.closest(".track"), fb = inner(f);
        per = +f.dataset.duration / fb.width;
        drawn = kind === "frame_range" ? [(b.left - fb.left) * per] : [(b.left - fb.left) * per, (b.right - fb.left) * per];
      } else if (kind === "character_range") {
        per = 0;
        drawn = [+e.dataset.start, +e.dataset.start + Array.from(e.textContent).length];
      }
      if (drawn) { e.dataset.drawn = drawn.map((v) => +v.toFixed(3)).join(","); e.dataset.unitsPerPx = String(+per.toFixed(6)); n += 1; }
    }
    document.body.dataset.measured = String(n);
  }
  if (wanted) {
    const id = decodeURIComponent(wanted.slice("locus=".length));
    const e = document.querySelector(`[data-locus="${CSS.escape(id)}"]`);
    if (e) { e.classList.add("picked"); e.scrollIntoView({ block: "center" }); show(byId.get(id)); }
  }
  // How long the page took to open (parse, this script, first layout): shown in the footer.
  window.addEventListener("load", () => { document.body.dataset.loadedMs = String(Math.round(performance.now())); });
})();
