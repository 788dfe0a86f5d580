"""The embedded evidence index: one SQLite file, FTS5 with BM25, nothing to start.

Each scope has its own FTS5 table (``fts_<hash of the scope>``) holding only its active units, so a
search is one FTS5 match of every term in the scope's table, ranked by BM25 through FTS5's top-N
path: no other scope's units are read, and no filter over a million-entry doclist is needed (a
scope token in one shared table cost ~37 ms a query at a million units). The query is never FTS5
syntax: the terms are quoted here.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import threading
from pathlib import Path

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.index import AddReport, Nomination, StoredUnit, group_units
from mediafleet.discovery.units import Scope, Unit, units_from_bundle

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
"""


def fts_table(scope: Scope) -> str:
    """The scope's FTS5 table name (a hash: a scope's names never reach SQL text)."""
    return "fts_" + hashlib.sha256(f"{scope.workspace}\0{scope.subject}".encode()).hexdigest()[:32]


def _quoted(term: str) -> str:
    return '"' + term.replace('"', '""') + '"'


def match_expression(terms: list[str]) -> str:
    """``"t1" AND "t2" …``, every term a quoted string."""
    return " AND ".join(_quoted(t) for t in terms)


class SqliteIndex:
    """The index in one SQLite file (WAL; safe for several processes on one host)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._lock = threading.Lock()
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

    def close(self) -> None:
        with self._lock:
            self._db.close()

    # -- writing --------------------------------------------------------------------------------

    def add_bundle(self, scope: Scope, bundle: EvidenceBundle) -> AddReport:
        units = units_from_bundle(bundle)
        if not units:
            return AddReport(0, 0, self.scope_generation(scope))
        return self.add_units(scope, units)

    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport:
        digest, action, derivation = group_units(units)
        key = (scope.workspace, scope.subject, digest, action)
        fts = fts_table(scope)
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

    def scope_generation(self, scope: Scope) -> int:
        with self._lock:
            return self._generation(scope)

    def search(self, scope: Scope, terms: list[str], limit: int) -> list[Nomination]:
        if not terms or limit <= 0:
            return []
        fts = fts_table(scope)
        with self._lock:
            if not self._has_table(fts):
                return []
            rows = self._db.execute(
                f"SELECT u.unit_id, u.derivation_ref, f.rank FROM (SELECT rowid, rank FROM {fts} WHERE {fts} "
                "MATCH ? ORDER BY rank LIMIT ?) AS f JOIN units u ON u.id = f.rowid ORDER BY f.rank, u.id",
                (match_expression(terms), limit),
            ).fetchall()
        # BM25 in FTS5 is negative, better first; the score handed on is its magnitude.
        return [Nomination(uid, derivation, -float(rank)) for uid, derivation, rank in rows]

    def load(self, scope: Scope, unit_ids: list[str]) -> dict[str, StoredUnit]:
        if not unit_ids:
            return {}
        marks = ", ".join("?" * len(unit_ids))
        with self._lock:
            rows = self._db.execute(
                "SELECT unit_id, digest, action, derivation_ref, generation, active, text, source_range FROM units "
                f"WHERE workspace = ? AND subject = ? AND unit_id IN ({marks})",
                (scope.workspace, scope.subject, *unit_ids),
            ).fetchall()
        out: dict[str, StoredUnit] = {}
        for uid, digest, action, derivation, generation, active, text, source in rows:
            unit = Unit(unit_id=uid, text=text, digest=digest, action=action, derivation_ref=derivation,
                        source_range=json.loads(source))
            out[uid] = StoredUnit(unit=unit, scope=scope, active=bool(active), generation=int(generation))
        return out
