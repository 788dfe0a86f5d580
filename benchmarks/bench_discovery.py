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
from mediafleet.discovery.index import EvidenceIndex, open_index  # noqa: E402
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


def time_searches(index: EvidenceIndex, sets: dict[str, list[str]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    everything: list[float] = []
    for name, texts in sets.items():
        for text in texts[:10]:  # warm the caches as a serving process would be
            index.search(SCOPE, query_terms(text), NOMINATIONS)
        samples, found = [], 0
        for text in texts:
            start = time.perf_counter()
            nominated = index.search(SCOPE, query_terms(text), NOMINATIONS)
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


def time_operations(folder: Path, index: EvidenceIndex, texts: list[str]) -> dict[str, Any]:
    create_key_file(folder / "receipt.key")
    host = LeaseHost(folder / "host.db")
    service = DiscoveryService(host, index, ReceiptKey(folder / "receipt.key"), lambda request: True)
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


def main(count: int = 1_000_000, query_count: int = 300) -> None:
    from tests.discovery_fixtures import PostgresServer

    folder = Path(tempfile.mkdtemp(prefix="mf-bench-discovery-"))
    try:
        run(folder, count, query_count, PostgresServer)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run(folder: Path, count: int, query_count: int, postgres_server: Any) -> None:
    start = time.perf_counter()
    artifacts = generate(count)
    generated_s = time.perf_counter() - start
    sets = queries(query_count)
    results: dict[str, Any] = {"units": count, "units_per_artifact": PER_ARTIFACT, "vocabulary": VOCABULARY,
                               "words_per_unit": WORDS_PER_UNIT, "nominations": NOMINATIONS,
                               "generation_s": round(generated_s, 1),
                               "ranking_rule": {"common_units": DEFAULT_RULE.common_units,
                                                "candidates": DEFAULT_RULE.candidates}, "indexes": {}}
    print(f"{count:,} units generated in {generated_s:.1f} s", file=sys.stderr)

    sqlite = open_index(f"sqlite:{folder / 'index.db'}")
    built = build(sqlite, artifacts)
    print(f"SQLite: {built['units_per_s']:,} units/s", file=sys.stderr)
    results["indexes"]["sqlite_fts5"] = {"indexing": built, "search": time_searches(sqlite, sets),
                                         "file_mb": round((folder / "index.db").stat().st_size / 2**20)}
    results["indexes"]["sqlite_fts5"]["operation"] = time_operations(folder, sqlite, sets["content words"])
    full = open_index(f"sqlite:{folder / 'index.db'}", FULL_RANKING)
    results["indexes"]["sqlite_fts5"]["against_full_ranking"] = against_full_ranking(sqlite, full, sets)
    full.close()
    sqlite.close()

    server = postgres_server()
    server.start()
    try:
        postgres = open_index(server.url)
        built = build(postgres, artifacts)
        print(f"PostgreSQL: {built['units_per_s']:,} units/s", file=sys.stderr)
        postgres._db.execute("VACUUM ANALYZE mf_discovery_units")  # type: ignore[attr-defined]
        results["indexes"]["postgresql_fts"] = {"indexing": built, "search": time_searches(postgres, sets)}
        full = open_index(server.url, FULL_RANKING)
        results["indexes"]["postgresql_fts"]["against_full_ranking"] = against_full_ranking(postgres, full, sets)
        full.close()
        postgres.close()
    finally:
        server.stop()

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
    print(table(rows))
    print(f"written to {path.relative_to(Path(__file__).resolve().parents[1])}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
