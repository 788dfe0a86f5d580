"""The embedded evidence index: one SQLite file, FTS5 with BM25, nothing to start.

Each scope has its own FTS5 table (``fts_<hash of the scope>``) holding only its active units, so a
search reads only the scope's units and no filter over a million-entry doclist is needed (a scope
token in one shared table cost ~37 ms a query at a million units). The query is never FTS5
syntax: the terms are quoted here.

A search follows :mod:`mediafleet.discovery.ranking`. Whether a word is very common is one FTS5
match read to its ``common_units + 1``-th entry at most. With a word that is not very common, FTS5
ranks by BM25 over a match of those words only (FTS5's BM25 reads each phrase's whole posting
list for its IDF, ~30 ms for a word in 850,000 units, which is what the rule avoids), and the
units holding every word are one more FTS5 match. When every word is very common, the
``candidates`` matches of highest row id are read with their text and FTS5's stored length, and
scored here with BM25's term frequency and length normalisation against FTS5's average length.
"""

from __future__ import annotations

import hashlib
import math
import re
import sqlite3
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mediafleet.discovery.index import AddReport, Nomination, group_units
from mediafleet.discovery.index_base import IndexBase
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule
from mediafleet.discovery.units import Scope, Unit

__all__ = ["SqliteIndex"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS scopes (
    workspace TEXT NOT NULL, subject TEXT NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (workspace, subject)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS artifacts (
    workspace TEXT NOT NULL, subject TEXT NOT NULL, digest TEXT NOT NULL, action TEXT NOT NULL,
    derivation_ref TEXT NOT NULL, generation INTEGER NOT NULL,
    PRIMARY KEY (workspace, subject, digest, action)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS units (
    id INTEGER PRIMARY KEY, workspace TEXT NOT NULL, subject TEXT NOT NULL, unit_id TEXT NOT NULL,
    digest TEXT NOT NULL, action TEXT NOT NULL, derivation_ref TEXT NOT NULL, generation INTEGER NOT NULL,
    active INTEGER NOT NULL, text TEXT NOT NULL, source_range TEXT NOT NULL,
    UNIQUE (workspace, subject, unit_id));
CREATE INDEX IF NOT EXISTS units_by_artifact ON units (workspace, subject, digest, action, active);
CREATE TABLE IF NOT EXISTS vectors (id INTEGER PRIMARY KEY, vector BLOB NOT NULL);
"""


def fts_table(scope: Scope) -> str:
    """The scope's FTS5 table name (a hash: a scope's names never reach SQL text)."""
    return "fts_" + hashlib.sha256(f"{scope.workspace}\0{scope.subject}".encode()).hexdigest()[:32]


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """``"t1" AND "t2" …``, every term a quoted string."""
    return " AND ".join(_quoted(t) for t in terms)


# FTS5's BM25 constants, and its unicode61 token characters (categories L*, N*, Co) as Python sees them.
_K1, _B = 1.2, 0.75
_TOKEN = re.compile("(?:[^\\W_]|[\ue000-\uf8ff\U000f0000-\U000ffffd\U00100000-\U0010fffd])+")


def term_frequency(term: str, folded: str) -> int:
    """How often ``term`` occurs in folded text as FTS5 matches it: its tokens, in order, as whole tokens."""
    return _occurrences(_TOKEN.findall(term), folded)


def _occurrences(want: list[str], folded: str) -> int:
    have = _TOKEN.findall(folded)
    if len(want) == 1:
        return have.count(want[0])
    return sum(have[i:i + len(want)] == want for i in range(len(have) - len(want) + 1)) if want else 0


def _varints(blob: bytes) -> Iterator[int]:
    """SQLite's varints (FTS5's ``%_data`` averages record and ``%_docsize`` sizes)."""
    i = 0
    while i < len(blob):
        value = 0
        for n in range(9):
            byte = blob[i]
            i += 1
            if n == 8:
                value = (value << 8) | byte
                break
            value = (value << 7) | (byte & 0x7F)
            if byte < 0x80:
                break
        yield value


def _first_varint(blob: bytes) -> int:
    return blob[0] if blob[0] < 0x80 else next(_varints(blob))


class SqliteIndex(IndexBase):
    """The index in one SQLite file (WAL; safe for several processes on one host).

    Args:
        path: the file (created with its folder when missing).
        rule: the ranking rule (:mod:`mediafleet.discovery.ranking`).
    """

    def __init__(self, path: Path, rule: RankingRule = DEFAULT_RULE) -> None:
        super().__init__(rule)
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = NORMAL")
        # Large doclists (a common word over a million units) are read from memory, not re-read.
        self._db.execute("PRAGMA cache_size = -131072")  # KiB: 128 MiB
        self._db.execute("PRAGMA mmap_size = 1073741824")
        with self._lock:
            self._db.executescript(_SCHEMA)

    def _has_table(self, table: str) -> bool:
        return self._db.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?",
                                (table,)).fetchone() is not None

    def _close(self) -> None:
        self._db.close()

    # -- writing --------------------------------------------------------------------------------

    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport:
        digest, action, derivation = group_units(units)
        key = (scope.workspace, scope.subject, digest, action)
        fts = fts_table(scope)
        vectors = dict(zip((u.unit_id for u in units), self._embed(units), strict=True))
        with self._lock:
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute(f"CREATE VIRTUAL TABLE IF NOT EXISTS {fts} USING fts5(folded, "
                           "tokenize = 'unicode61 remove_diacritics 0')")
                row = db.execute("SELECT derivation_ref, generation FROM artifacts WHERE workspace = ? AND subject = ? "
                                 "AND digest = ? AND action = ?", key).fetchone()
                superseded = 0
                if row is None:
                    generation = 1
                    db.execute("INSERT INTO artifacts VALUES (?, ?, ?, ?, ?, ?)", (*key, derivation, generation))
                elif row[0] != derivation:
                    generation = row[1] + 1
                    old = [r[0] for r in db.execute("SELECT id FROM units WHERE workspace = ? AND subject = ? AND "
                                                    "digest = ? AND action = ? AND active = 1", key)]
                    db.executemany("UPDATE units SET active = 0 WHERE id = ?", [(i,) for i in old])
                    db.executemany(f"DELETE FROM {fts} WHERE rowid = ?", [(i,) for i in old])
                    superseded = len(old)
                    db.execute("UPDATE artifacts SET derivation_ref = ?, generation = ? WHERE workspace = ? AND "
                               "subject = ? AND digest = ? AND action = ?", (derivation, generation, *key))
                else:
                    generation = row[1]
                before = {r[0] for r in db.execute("SELECT id FROM units WHERE workspace = ? AND subject = ? AND "
                                                   "digest = ? AND action = ? AND active = 1", key)}
                db.executemany(
                    "INSERT INTO units (workspace, subject, unit_id, digest, action, derivation_ref, generation, active, "
                    "text, source_range) VALUES (?, ?, ?, ?, ?, ?, ?, 1, ?, ?) ON CONFLICT (workspace, subject, unit_id) "
                    "DO UPDATE SET active = 1, generation = excluded.generation, derivation_ref = excluded.derivation_ref, "
                    "text = excluded.text, source_range = excluded.source_range WHERE active = 0",
                    [(scope.workspace, scope.subject, u.unit_id, digest, action, derivation, generation, u.text,
                      u.source_json()) for u in units],
                )
                folded = {u.unit_id: u.folded for u in units}
                now = db.execute("SELECT id, unit_id FROM units WHERE workspace = ? AND subject = ? AND digest = ? AND "
                                 "action = ? AND active = 1", key).fetchall()
                added = [(i, folded[uid]) for i, uid in now if i not in before and uid in folded]
                db.executemany(f"INSERT INTO {fts} (rowid, folded) VALUES (?, ?)", added)
                db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                               [(i, vectors[uid]) for i, uid in now if i not in before and uid in vectors])
                if added or superseded:
                    db.execute("INSERT INTO scopes VALUES (?, ?, 1) ON CONFLICT (workspace, subject) "
                               "DO UPDATE SET generation = generation + 1", (scope.workspace, scope.subject))
                scope_generation = self._generation(scope)
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
        return AddReport(len(added), superseded, scope_generation)

    # -- reading --------------------------------------------------------------------------------

    def _generation(self, scope: Scope) -> int:
        row = self._db.execute("SELECT generation FROM scopes WHERE workspace = ? AND subject = ?",
                               (scope.workspace, scope.subject)).fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        self._db.execute("BEGIN")  # deferred: every read of the search sees one snapshot
        try:
            yield
        finally:
            self._db.execute("COMMIT")

    def _has_scope(self, scope: Scope) -> bool:
        return self._has_table(fts_table(scope))

    def _held_by_more_than(self, scope: Scope, term: str, count: int) -> bool:
        fts = fts_table(scope)
        return self._db.execute(f"SELECT 1 FROM {fts} WHERE {fts} MATCH ? LIMIT 1 OFFSET ?",
                                (match_expression([term]), count)).fetchone() is not None

    def _rank(self, scope: Scope, terms: tuple[str, ...], ranked_by: tuple[str, ...],
              limit: int) -> list[Nomination]:
        fts = fts_table(scope)
        ranked = f"SELECT rowid, rank FROM {fts} WHERE {fts} MATCH ? ORDER BY rank, rowid"
        if len(ranked_by) == len(terms):
            rows = self._db.execute(ranked + " LIMIT ?", (match_expression(list(terms)), limit)).fetchall()
        else:
            holders = {r for (r,) in self._db.execute(f"SELECT rowid FROM {fts} WHERE {fts} MATCH ?",
                                                      (match_expression(list(terms)),))}
            rows = []
            if holders:
                for rowid, rank in self._db.execute(ranked, (match_expression(list(ranked_by)),)):
                    if rowid in holders:
                        rows.append((rowid, rank))
                        if len(rows) == limit:
                            break
        # BM25 in FTS5 is negative, better first; the score handed on is its magnitude.
        return self._nominations(scope, [(rowid, -float(rank)) for rowid, rank in rows])

    def _rank_newest(self, scope: Scope, terms: tuple[str, ...], candidates: int, limit: int) -> list[Nomination]:
        fts = fts_table(scope)
        rows = self._db.execute(
            f"SELECT f.rowid, f.folded, d.sz FROM {fts} AS f JOIN {fts}_docsize AS d ON d.id = f.rowid "
            f"WHERE {fts} MATCH ? ORDER BY f.rowid DESC LIMIT ?", (match_expression(list(terms)), candidates),
        ).fetchall()
        if not rows:
            return []
        _, average = self._averages(fts)
        # FTS5 matched every term, so each occurs at least once: a one-token term that occurs once as
        # a substring occurs once as a token; only the others are counted token by token (and a
        # count of 0 is a character FTS5 and Python classify differently: 1, as FTS5 matched).
        counted = [(t, _TOKEN.findall(t), _TOKEN.fullmatch(t) is not None) for t in terms]
        scored = []
        for rowid, folded, size in rows:
            norm = _K1 * (1 - _B + _B * _first_varint(size) / average)
            score = 0.0
            for term, tokens, single in counted:
                tf = 1 if single and folded.count(term) < 2 else max(_occurrences(tokens, folded), 1)
                score += tf * (_K1 + 1) / (tf + norm)
            scored.append((-score, rowid))
        scored.sort()
        return self._nominations(scope, [(rowid, -score) for score, rowid in scored[:limit]])

    def _rank_partial(self, scope: Scope, groups: tuple[tuple[str, ...], ...], ranked_by: tuple[str, ...],
                      candidates: int) -> list[tuple[Nomination, str]]:
        fts = fts_table(scope)
        if all(len(g) == 1 for g in groups):
            # A long query: FTS5 ranks every unit holding any of the rarer words (the filter comes after).
            rows = self._db.execute(f"SELECT rowid, rank, folded FROM {fts} WHERE {fts} MATCH ? ORDER BY rank, rowid "
                                    "LIMIT ?", (" OR ".join(_quoted(g[0]) for g in groups), candidates)).fetchall()
            found = self._active(scope, [rowid for rowid, _, _ in rows])
            return [(Nomination(*found[rowid], -float(rank)), text) for rowid, rank, text in rows if rowid in found]
        # FTS5 intersects the groups' posting lists (no ranking: the units it returns are the few that qualify,
        # the last indexed first when more than ``candidates`` do); they are scored here with FTS5's own BM25
        # over the rarer words, whose posting lists are short by the rule (at most ``common_units`` entries).
        expression = " OR ".join("(" + match_expression(list(g)) + ")" for g in groups)
        rows = self._db.execute(
            f"SELECT f.rowid, f.folded, d.sz FROM {fts} AS f JOIN {fts}_docsize AS d ON d.id = f.rowid "
            f"WHERE {fts} MATCH ? ORDER BY f.rowid DESC LIMIT ?", (expression, candidates)).fetchall()
        if not rows:
            return []
        units, average = self._averages(fts)
        weights = []
        for term in ranked_by:
            (hits,) = self._db.execute(f"SELECT count(*) FROM {fts} WHERE {fts} MATCH ?",
                                       (match_expression([term]),)).fetchone()
            idf = math.log((units - hits + 0.5) / (hits + 0.5))
            weights.append((_TOKEN.findall(term), idf if idf > 0 else 1e-6))  # as FTS5's bm25() floors it
        scored = []
        for rowid, folded, size in rows:
            norm = _K1 * (1 - _B + _B * _first_varint(size) / average)
            score = 0.0
            for tokens, idf in weights:
                tf = _occurrences(tokens, folded)
                if tf:
                    score += idf * tf * (_K1 + 1) / (tf + norm)
            scored.append((-score, rowid, folded))
        scored.sort(key=lambda s: (s[0], s[1]))
        found = self._active(scope, [rowid for _, rowid, _ in scored])
        return [(Nomination(*found[rowid], -score), text) for score, rowid, text in scored if rowid in found]

    def _averages(self, fts: str) -> tuple[int, float]:
        """FTS5's row count and average unit length in tokens (its averages record: rows, then tokens)."""
        row = self._db.execute(f"SELECT block FROM {fts}_data WHERE id = 1").fetchone()
        units, tokens = list(_varints(row[0]))[:2]
        return units, (tokens / units if units and tokens else 1.0)

    def _nominations(self, scope: Scope, ranked: list[tuple[int, float]]) -> list[Nomination]:
        """The ranked row ids as nominations, each checked again to be an active unit of the scope."""
        found = self._active(scope, [rowid for rowid, _ in ranked])
        return [Nomination(*found[rowid], score) for rowid, score in ranked if rowid in found]

    def _active(self, scope: Scope, rowids: list[int]) -> dict[int, tuple[str, str]]:
        """``{row id: (unit_id, derivation_ref)}`` of those row ids that are active units of the scope."""
        if not rowids:
            return {}
        marks = ", ".join("?" * len(rowids))
        # NOT INDEXED: looked up by row id (still allowed), never by scanning the scope in units_by_artifact.
        return {i: (uid, derivation) for i, uid, derivation in self._db.execute(
            f"SELECT id, unit_id, derivation_ref FROM units NOT INDEXED WHERE id IN ({marks}) AND workspace = ? "
            "AND subject = ? AND active = 1", (*rowids, scope.workspace, scope.subject))}

    def _vector_rows(self, scope: Scope) -> Iterable[tuple[str, str, bytes]]:
        return self._db.execute(
            "SELECT u.unit_id, u.derivation_ref, v.vector FROM units AS u JOIN vectors AS v ON v.id = u.id "
            "WHERE u.workspace = ? AND u.subject = ? AND u.active = 1 ORDER BY u.id",
            (scope.workspace, scope.subject)).fetchall()

    def _unit_rows(self, scope: Scope, unit_ids: list[str]) -> Iterable[tuple[Any, ...]]:
        marks = ", ".join("?" * len(unit_ids))
        return self._db.execute(
            "SELECT unit_id, digest, action, derivation_ref, generation, active, text, source_range FROM units "
            f"WHERE workspace = ? AND subject = ? AND unit_id IN ({marks})",
            (scope.workspace, scope.subject, *unit_ids),
        ).fetchall()
