"""Evidence discovery: indexing rate and search latency on a million generated units, SQLite against PostgreSQL.

One run builds the same units into both indexes, then times the same queries against each:

* **indexing**: ``add_units`` of artifacts of 1,000 units each (what ``index add`` and the
  indexing hook do per bundle): units/s, including NFKC folding and the full-text index;
* **search**: ``search`` (20 nominations under the ranking rule of
  ``mediafleet.discovery.ranking``: a unit matches when it holds every word; a word in more than
  10,000 units of the scope is very common and only filters when the query has a rarer word; a
  query of very common words only ranks the 2,000 matching units indexed last) plus ``load`` of
  the nominated units (the reload delivery does), p50 and p99 in ms, for three kinds of query:
  *content words* (one to three words of the vocabulary's long tail), *a common and a content
  word* (one of the 50 most frequent words, each in 2% to 85% of the units, with a long-tail
  word), and *one common word alone* (the worst case); "all" is the three together;
* **what the rule changes**: each query's nominations against those of a full ranking of every
  matching unit by every word (BM25 in FTS5 / ts_rank, the ranking before the rule): the share of
  queries nominating the same units in the same order, and the mean share of the full ranking's
  units that are nominated (overlap);
* **operation** (embedded only): a whole ``discovery-search`` through the host (lease reservation
  fsynced, nomination, reload, AES-GCM receipt committed with the delivery), p50 and p99.

Units: 12 words each drawn from a 20,000-word vocabulary with Zipf frequencies (s = 1.1), text
and ``source_range`` shaped like a real audio segment's. PostgreSQL is a real server started for
the run (as in the tests), on the same machine, with fsync off for both its load and the tests.
Run: ``.venv/bin/python benchmarks/bench_discovery.py [units] [queries]`` (default 1,000,000 and 300).
"""

from __future__ import annotations

import bisect
import itertools
import random
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.harness import table, write_results  # noqa: E402
from mediafleet.discovery import DiscoveryService, LeaseHost, NavigationBudget, ReceiptKey, create_key_file  # noqa: E402
from mediafleet.discovery.index import EvidenceIndex  # noqa: E402
from mediafleet.discovery.index_open import open_index  # noqa: E402
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule  # noqa: E402
from mediafleet.discovery.text import query_terms  # noqa: E402
from mediafleet.discovery.units import Scope, Unit  # noqa: E402

SCOPE = Scope("bench")
PER_ARTIFACT = 1000
VOCABULARY = 20_000
WORDS_PER_UNIT = 12
COMMON = 50
NOMINATIONS = 20
SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]
# No word is ever very common: every matching unit is ranked by every word (the ranking before the rule).
FULL_RANKING = RankingRule(common_units=10**15, candidates=1)


def vocabulary() -> list[str]:
    words = ("".join(p) for n in (2, 3, 4) for p in itertools.product(SYLLABLES, repeat=n))
    return list(itertools.islice(words, VOCABULARY))


def generate(count: int, seed: int = 15) -> list[list[Unit]]:
    """``count`` units in artifacts of ``PER_ARTIFACT``, each artifact one extraction."""
    rng = random.Random(seed)
    words = vocabulary()
    cumulative = list(itertools.accumulate(1 / (r + 1) ** 1.1 for r in range(VOCABULARY)))
    total = cumulative[-1]
    draws = [min(bisect.bisect(cumulative, rng.random() * total), VOCABULARY - 1)
             for _ in range(count * WORDS_PER_UNIT)]
    artifacts = []
    for a in range(0, count, PER_ARTIFACT):
        digest = f"sha256:{a:064x}"
        derivation = f"eg:derivation:{a:032x}"
        units = []
        for i in range(a, min(a + PER_ARTIFACT, count)):
            text = " ".join(words[d] for d in draws[i * WORDS_PER_UNIT:(i + 1) * WORDS_PER_UNIT]).capitalize() + "."
            start = (i - a) * 4000
            units.append(Unit(
                unit_id=f"eg:locus:{i:032x}", text=text, digest=digest, action="transcribe_segments",
                derivation_ref=derivation,
                source_range={"artifact": {"digest": digest, "media_type": "audio/ogg", "modality": "audio"},
                              "locus_kind": "audio_range", "address": {"kind": "audio_range", "start_ms": start,
                                                                        "end_ms": start + 3500},
                              "occurrence_id": f"occurrence:{a:032x}", "timeline": "audio_stream_ms",
                              "segment": i - a + 1, "language": "en", "confidence": 0.84,
                              "generation": {"derivation_ref": derivation, "job_id": f"mf-{a:032x}",
                                             "extractor": "mediafleet.audio.transcribe", "extractor_version": "1",
                                             "engine": "faster-whisper", "engine_version": "1.2.1"}}))
        artifacts.append(units)
    return artifacts


def queries(count: int, seed: int = 16) -> dict[str, list[str]]:
    rng = random.Random(seed)
    words = vocabulary()
    content = [" ".join(rng.choice(words[COMMON * 4:]) for _ in range(rng.randint(1, 3))) for _ in range(count)]
    common = [f"{rng.choice(words[:COMMON])} {rng.choice(words[COMMON * 4:])}" for _ in range(count // 3)]
    alone = [rng.choice(words[:COMMON]) for _ in range(count // 10)]
    return {"content words": content, "a common and a content word": common, "one common word alone": alone}


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    p99 = ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]
    return {"p50_ms": round(statistics.median(ordered) * 1000, 2), "p99_ms": round(p99 * 1000, 2),
            "max_ms": round(ordered[-1] * 1000, 2), "queries": len(ordered)}


def build(index: EvidenceIndex, artifacts: list[list[Unit]]) -> dict[str, Any]:
    start = time.perf_counter()
    for units in artifacts:
        index.add_units(SCOPE, units)
    seconds = time.perf_counter() - start
    count = sum(len(u) for u in artifacts)
    return {"units": count, "seconds": round(seconds, 1), "units_per_s": round(count / seconds)}


def _both(index: EvidenceIndex, text: str) -> list[Any]:
    """Both channels, fused, as a search with MEDIAFLEET_DISCOVERY_CHANNELS=lexical,semantic does."""
    from mediafleet.discovery.operations import fuse

    lists = {"lexical": index.search(SCOPE, query_terms(text), NOMINATIONS),
             "semantic": index.nearest(SCOPE, text, NOMINATIONS)}
    return [n for n, _ in fuse(lists, NOMINATIONS)]


def time_searches(index: EvidenceIndex, sets: dict[str, list[str]], semantic: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    everything: list[float] = []
    if semantic:  # the scope's vectors are read into memory once per generation: timed apart
        start = time.perf_counter()
        index.nearest(SCOPE, "warm", 1)
        out["vectors_loaded_s"] = round(time.perf_counter() - start, 2)
    for name, texts in sets.items():
        for text in texts[:10]:  # warm the caches as a serving process would be
            index.search(SCOPE, query_terms(text), NOMINATIONS)
        samples, found = [], 0
        for text in texts:
            start = time.perf_counter()
            nominated = _both(index, text) if semantic else index.search(SCOPE, query_terms(text), NOMINATIONS)
            index.load(SCOPE, [n.unit_id for n in nominated])
            samples.append(time.perf_counter() - start)
            found += len(nominated)
        out[name] = {**percentiles(samples), "mean_nominated": round(found / len(texts), 1)}
        everything += samples
    out["all"] = percentiles(everything)
    return out


def against_full_ranking(index: EvidenceIndex, full: EvidenceIndex, sets: dict[str, list[str]]) -> dict[str, Any]:
    """Per kind of query: how often the rule's nominations are the full ranking's, and their mean overlap."""
    out: dict[str, Any] = {}
    for name, texts in sets.items():
        same, overlap = 0, 0.0
        for text in texts:
            ruled = [n.unit_id for n in index.search(SCOPE, query_terms(text), NOMINATIONS)]
            reference = [n.unit_id for n in full.search(SCOPE, query_terms(text), NOMINATIONS)]
            same += ruled == reference
            overlap += len(set(ruled) & set(reference)) / len(reference) if reference else 1.0
        out[name] = {"same_nominations": round(same / len(texts), 3), "mean_overlap": round(overlap / len(texts), 3)}
    return out


def time_operations(folder: Path, index: EvidenceIndex, texts: list[str],
                    channels: tuple[str, ...] = ("lexical",)) -> dict[str, Any]:
    if not (folder / "receipt.key").exists():
        create_key_file(folder / "receipt.key")
    host = LeaseHost(folder / "host.db")
    service = DiscoveryService(host, index, ReceiptKey(folder / "receipt.key"), lambda request: True,
                               channels=channels)
    binding = host.bind(SCOPE, "bench-agent")
    samples = []
    for chunk in range(0, len(texts), 50):
        lease, credential = host.open_lease(binding, ttl_s=3600, generation=index.scope_generation(SCOPE),
                                            budget=NavigationBudget(50, 10**6, 10**9))
        for text in texts[chunk:chunk + 50]:
            start = time.perf_counter()
            service.search(credential, lease.lease_id, text)
            samples.append(time.perf_counter() - start)
    host.close()
    return percentiles(samples)


# -- recall on real text: Debian's Asterisk prompts and Debian FAQ, queries in other words ------------

PACKAGES = ("asterisk-core-sounds-en", "debian-faq")
RECALL_AT = 3
_ONES = "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen " \
        "seventeen eighteen nineteen".split()
_TENS_WORDS = "twenty thirty forty fifty sixty seventy eighty ninety".split()
# Paraphrases, written for this benchmark before it was first run (and not tuned on since): an
# agent's words for a prompt (by its Asterisk name) or a FAQ passage (by words only it holds).
PARAPHRASES = [
    ("prompt", "tt-weasels", "small animals chewed through the telephone wiring"),
    ("prompt", "priv-recordintro", "tell us who you are when you hear the beep"),
    ("prompt", "all-circuits-busy-now", "every line is engaged at the moment"),
    ("prompt", "ss-noservice", "that phone number is disconnected, verify it and dial again"),
    ("prompt", "invalid", "apologies, there is no such extension, have another go"),
    ("prompt", "conf-now-recording", "this meeting is being taped"),
    ("prompt", "queue-periodic-announce", "hold on, an agent will pick up your call shortly"),
    ("prompt", "something-terribly-wrong", "a serious fault has happened"),
    ("prompt", "demo-thanks", "thanks for testing this open source telephone exchange, bye"),
    ("prompt", "at-tone-time-exactly", "when you hear the signal it will be precisely this time"),
    ("prompt", "conf-onlyperson", "nobody else has joined this meeting yet"),
    ("prompt", "vm-goodbye", "farewell"),
    ("prompt", "agent-loginok", "you have signed in successfully"),
    ("prompt", "agent-loggedoff", "you have signed out"),
    ("prompt", "pbx-invalidpark", "no call is waiting on hold at that extension"),
    ("prompt", "conf-locked", "this meeting room has been closed to newcomers"),
    ("prompt", "conf-kicked", "the moderator removed you from the meeting"),
    ("prompt", "dir-nomatch", "nobody in the phone book matches"),
    ("prompt", "auth-incorrect", "wrong password"),
    ("prompt", "privacy-unident", "the caller withheld their number"),
    ("faq", "apt-get install", "how do I add a new program to my system from the archive"),
    ("faq", "stable", "which release should I run on a production server"),
    ("faq", "Debian Free Software Guidelines", "what rules decide whether software counts as free"),
    ("faq", "bug tracking system", "where do I report a problem I found in a package"),
    ("faq", "dpkg", "what tool unpacks and installs a single package file"),
    ("faq", "mailing lists", "where can I ask other users questions by email"),
    ("faq", "Social Contract", "what promises does the project make to its users"),
    ("faq", "upgrade", "how do I move my machine to the next release"),
    ("faq", "non-free", "where is software that is not free kept"),
    ("faq", "security updates", "how do I get fixes for vulnerabilities"),
]


def _say(n: int) -> str:
    """A number below 1,000 in words."""
    if n < 20:
        return _ONES[n]
    if n < 100:
        return _TENS_WORDS[n // 10 - 2] + ("" if n % 10 == 0 else " " + _ONES[n % 10])
    rest = n % 100
    return _ONES[n // 100] + " hundred" + ("" if rest == 0 else " and " + _say(rest))


def _real_texts(folder: Path) -> tuple[dict[str, str], list[str]]:
    """The Asterisk prompts (name -> text) and the Debian FAQ's paragraphs, from the Debian packages."""
    import gzip
    import subprocess

    debs = folder / "debs"
    debs.mkdir()
    subprocess.run(["apt-get", "download", *PACKAGES], cwd=debs, check=True, capture_output=True, timeout=300)
    for deb in debs.glob("*.deb"):
        subprocess.run(["dpkg-deb", "-x", str(deb), str(debs / "root")], check=True)
    root = debs / "root" / "usr" / "share" / "doc"
    prompts: dict[str, str] = {}
    with gzip.open(root / "asterisk-core-sounds-en" / "core-sounds-en.txt.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            name, sep, text = line.partition(":")
            text = text.strip()
            if sep and not line.startswith(";") and text and text[0] not in "[<" and len(text.split()) >= 2:
                prompts.setdefault(name.strip(), text)
    with gzip.open(root / "debian" / "FAQ" / "debian-faq.en.txt.gz", "rt", encoding="utf-8") as fh:
        paragraphs = [" ".join(p.split()) for p in fh.read().split("\n\n")]
    faq = [p for p in paragraphs if len(p.split()) >= 8 and not set(p) <= set("-=*. ")]
    return prompts, faq


def _other_words(words: list[str], rng: random.Random) -> list[str] | None:
    """Numbers, abbreviations, spellings and contractions said the other way; None when nothing changes."""
    swap = {"mr": "mister", "mister": "mr", "dr": "doctor", "doctor": "dr", "st": "street", "street": "st",
            "color": "colour", "colour": "color", "organize": "organise", "center": "centre", "centre": "center",
            "license": "licence", "licence": "license", "don't": "do not", "can't": "cannot", "isn't": "is not",
            "it's": "it is", "you're": "you are", "won't": "will not", "e-mail": "email", "email": "e-mail",
            "voicemail": "voice mail", "touchtone": "touch tone", "touch-tone": "touchtone", "first": "1st",
            "second": "2nd", "third": "3rd", "1st": "first", "2nd": "second", "3rd": "third"}
    number_words = {w: i for i, w in enumerate(_ONES)} | {w: 10 * i for i, w in enumerate(_TENS_WORDS, start=2)}
    out, changed = [], False
    for word in words:
        bare = word.strip(".,;:!?()\"").lower()
        if bare.isdigit() and int(bare) < 1000:
            out.append(_say(int(bare)))
            changed = True
        elif bare in number_words:
            out.append(str(number_words[bare]))
            changed = True
        elif bare in swap:
            out.append(swap[bare])
            changed = True
        else:
            out.append(bare)
    return out if changed else None


def recall_queries(prompts: dict[str, str], faq: list[str], texts: list[str],
                   seed: int = 42) -> dict[str, list[tuple[str, str]]]:
    """``{kind: [(query, the text it was made from)]}``, made here from the real texts by a seeded draw."""
    rng = random.Random(seed)
    vocabulary = sorted({w.strip(".,;:!?()\"").lower() for t in texts for w in t.split()} - {""})
    other, off = [], []
    for text in rng.sample(texts, len(texts)):
        words = text.split()
        if len(other) < 150 and (changed := _other_words(words, rng)) is not None:
            # the window of at most 8 words around the first word said another way
            at = next(i for i, (a, b) in enumerate(zip(words, changed, strict=False))
                      if a.strip(".,;:!?()\"").lower() != b)
            start = max(0, min(at - 3, len(words) - 8))
            other.append((" ".join(changed[start:start + 8]), text))
        if len(off) < 150 and len(words) >= 4:
            start = rng.randrange(0, max(1, len(words) - 6))
            window = [w.strip(".,;:!?()\"").lower() for w in words[start:start + rng.randint(4, 6)]]
            window[rng.randrange(len(window))] = rng.choice(vocabulary)  # one word off
            off.append((" ".join(window), text))
    paraphrased = []
    for kind, key, query in PARAPHRASES:
        if kind == "prompt" and key in prompts:
            paraphrased.append((query, prompts[key]))
        elif kind == "faq":
            holding = [p for p in faq if key in p]
            if holding:
                paraphrased.append((query, holding[0]))
    return {"numbers, abbreviations, spellings": other, "one word off": off, "paraphrases": paraphrased}


class _Before:
    """Lexical search as it was before normalisation and partial matches: folded text, every word, BM25."""

    def __init__(self, texts: list[str]) -> None:
        import sqlite3

        from mediafleet.discovery.text import fold

        self._fold = fold
        self._db = sqlite3.connect(":memory:")
        self._db.execute("CREATE VIRTUAL TABLE t USING fts5(folded, tokenize = 'unicode61 remove_diacritics 0')")
        self._db.executemany("INSERT INTO t (rowid, folded) VALUES (?, ?)", [(i, fold(t)) for i, t in enumerate(texts)])

    def search(self, query: str, limit: int) -> list[int]:
        import re

        terms = list(dict.fromkeys(re.findall(r"\w+", self._fold(query))))
        if not terms:
            return []
        expression = " AND ".join('"' + t.replace('"', '""') + '"' for t in terms)
        return [r for (r,) in self._db.execute("SELECT rowid FROM t WHERE t MATCH ? ORDER BY rank, rowid LIMIT ?",
                                               (expression, limit))]


def measure_recall(folder: Path) -> dict[str, Any]:
    """recall@3 and MRR (over 20 nominations) of each configuration, per kind of query."""
    from mediafleet.discovery.operations import fuse

    prompts, faq = _real_texts(folder)
    texts = list(dict.fromkeys([*prompts.values(), *faq]))  # one unit per distinct text
    units = [Unit(unit_id=f"eg:locus:{i:032x}", text=t, digest="sha256:" + "0" * 64, action="transcribe_segments",
                  derivation_ref="eg:derivation:" + "0" * 32, source_range={"artifact": {}}) for i, t in enumerate(texts)]
    number = {u.unit_id: i for i, u in enumerate(units)}
    index = open_index(f"sqlite:{folder / 'recall.db'}")
    start = time.perf_counter()
    index.add_units(SCOPE, units)
    indexing_s = time.perf_counter() - start
    before = _Before(texts)
    sets = recall_queries(prompts, faq, texts)

    def lexical(query: str) -> list[int]:
        return [number[n.unit_id] for n in index.search(SCOPE, query_terms(query), NOMINATIONS)]

    def both(query: str) -> list[int]:
        lists = {"lexical": index.search(SCOPE, query_terms(query), NOMINATIONS),
                 "semantic": index.nearest(SCOPE, query, NOMINATIONS)}
        return [number[n.unit_id] for n, _ in fuse(lists, NOMINATIONS)]

    def semantic(query: str) -> list[int]:
        return [number[n.unit_id] for n in index.nearest(SCOPE, query, NOMINATIONS)]

    def reciprocal_rank(query: str) -> list[int]:  # the first fusion rule (k = 60), kept here to compare
        scores: dict[int, float] = {}
        for ranked in (lexical(query), semantic(query)):
            for rank, unit in enumerate(ranked, start=1):
                scores[unit] = scores.get(unit, 0.0) + 1 / (60 + rank)
        first = list(dict.fromkeys([*lexical(query), *semantic(query)]))
        return sorted(scores, key=lambda u: (-scores[u], first.index(u)))[:NOMINATIONS]

    configurations = {"lexical, before (folded, every word)": lambda q: before.search(q, NOMINATIONS),
                      "normalised lexical (partial matches)": lexical,
                      "lexical + semantic, reciprocal rank (before)": reciprocal_rank,
                      "lexical + semantic (lexical first)": both, "semantic alone": semantic}
    where = {t: i for i, t in enumerate(texts)}
    out: dict[str, Any] = {"units": len(units), "prompts": len(prompts), "faq_paragraphs": len(faq),
                           "packages": list(PACKAGES), "recall_at": RECALL_AT,
                           "indexing_units_per_s": round(len(units) / indexing_s), "results": {}}
    for name, nominate in configurations.items():
        per_kind: dict[str, Any] = {}
        for kind, pairs in [*sets.items(), ("all", [p for ps in sets.values() for p in ps])]:
            hits, reciprocal = 0, 0.0
            for query, text in pairs:
                ranked = nominate(query)
                target = where[text]
                if target in ranked[:RECALL_AT]:
                    hits += 1
                if target in ranked:
                    reciprocal += 1 / (ranked.index(target) + 1)
            per_kind[kind] = {"queries": len(pairs), f"recall_at_{RECALL_AT}": round(hits / len(pairs), 3),
                              "mrr": round(reciprocal / len(pairs), 3)}
        out["results"][name] = per_kind
    out["examples"] = {kind: [q for q, _ in pairs[:3]] for kind, pairs in sets.items()}
    index.close()
    return out


def main(count: int = 1_000_000, query_count: int = 300, postgres: bool = True) -> None:
    from tests.discovery_fixtures import PostgresServer

    folder = Path(tempfile.mkdtemp(prefix="mf-bench-discovery-"))
    try:
        run(folder, count, query_count, PostgresServer, postgres)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _postgres(postgres_server: Any, artifacts: list[list[Unit]], sets: dict[str, list[str]]) -> dict[str, Any]:
    server = postgres_server()
    server.start()
    try:
        postgres = open_index(server.url)
        built = build(postgres, artifacts)
        print(f"PostgreSQL: {built['units_per_s']:,} units/s", file=sys.stderr)
        postgres._db.execute("VACUUM ANALYZE mf_discovery_units")  # type: ignore[attr-defined]
        out = {"indexing": built, "search": time_searches(postgres, sets),
               "search_lexical_semantic": time_searches(postgres, sets, semantic=True)}
        full = open_index(server.url, FULL_RANKING)
        out["against_full_ranking"] = against_full_ranking(postgres, full, sets)
        full.close()
        postgres.close()
        return out
    finally:
        server.stop()


def run(folder: Path, count: int, query_count: int, postgres_server: Any, postgres: bool = True) -> None:
    recall = measure_recall(folder)
    print(table([("configuration", "kind of query", "queries", f"recall@{RECALL_AT}", "MRR")] + [
        (name, kind, str(r["queries"]), f"{r[f'recall_at_{RECALL_AT}']:.1%}", f"{r['mrr']:.3f}")
        for name, kinds in recall["results"].items() for kind, r in kinds.items()]), file=sys.stderr)
    start = time.perf_counter()
    artifacts = generate(count)
    generated_s = time.perf_counter() - start
    sets = queries(query_count)
    results: dict[str, Any] = {"units": count, "units_per_artifact": PER_ARTIFACT, "vocabulary": VOCABULARY,
                               "words_per_unit": WORDS_PER_UNIT, "nominations": NOMINATIONS,
                               "generation_s": round(generated_s, 1),
                               "ranking_rule": {"common_units": DEFAULT_RULE.common_units,
                                                "candidates": DEFAULT_RULE.candidates},
                               "recall": recall, "indexes": {}}
    print(f"{count:,} units generated in {generated_s:.1f} s", file=sys.stderr)

    sqlite = open_index(f"sqlite:{folder / 'index.db'}")
    built = build(sqlite, artifacts)
    print(f"SQLite: {built['units_per_s']:,} units/s", file=sys.stderr)
    results["indexes"]["sqlite_fts5"] = {"indexing": built, "search": time_searches(sqlite, sets),
                                         "search_lexical_semantic": time_searches(sqlite, sets, semantic=True),
                                         "file_mb": round((folder / "index.db").stat().st_size / 2**20)}
    results["indexes"]["sqlite_fts5"]["operation"] = time_operations(folder, sqlite, sets["content words"])
    results["indexes"]["sqlite_fts5"]["operation_lexical_semantic"] = time_operations(
        folder, sqlite, sets["content words"], ("lexical", "semantic"))
    full = open_index(f"sqlite:{folder / 'index.db'}", FULL_RANKING)
    results["indexes"]["sqlite_fts5"]["against_full_ranking"] = against_full_ranking(sqlite, full, sets)
    full.close()
    sqlite.close()

    if postgres:
        results["indexes"]["postgresql_fts"] = _postgres(postgres_server, artifacts, sets)

    path = write_results("discovery", results)
    rows = [("index", "units/s", "kind of query", "p50 ms", "p99 ms", "same as full ranking", "overlap")]
    for name, data in results["indexes"].items():
        for kind in (*sets, "all"):
            s = data["search"][kind]
            against = data["against_full_ranking"].get(kind, {})
            rows.append((name, f"{data['indexing']['units_per_s']:,}", kind, f"{s['p50_ms']}", f"{s['p99_ms']}",
                         f"{against['same_nominations']:.0%}" if against else "",
                         f"{against['mean_overlap']:.0%}" if against else ""))
        if "operation" in data:
            o = data["operation"]
            rows.append((name, "", "whole discovery-search", f"{o['p50_ms']}", f"{o['p99_ms']}", "", ""))
            o = data["operation_lexical_semantic"]
            rows.append((name, "", "whole discovery-search, lexical+semantic", f"{o['p50_ms']}", f"{o['p99_ms']}",
                         "", ""))
        both = data["search_lexical_semantic"]
        for kind in (*sets, "all"):
            rows.append((name, "", f"lexical+semantic: {kind}", f"{both[kind]['p50_ms']}", f"{both[kind]['p99_ms']}",
                         "", ""))
    print(table(rows))
    print(f"written to {path.relative_to(Path(__file__).resolve().parents[1])}")


if __name__ == "__main__":
    numbers = [int(a) for a in sys.argv[1:] if a.isdigit()]
    main(*numbers[:2], postgres="--no-postgres" not in sys.argv[1:])
