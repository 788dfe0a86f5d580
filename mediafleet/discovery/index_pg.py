"""The evidence index on PostgreSQL: full-text search with a stored tsvector and a GIN index.

For several hosts sharing one index. Text is folded (NFKC, case folding) in Python before it is
stored, and the ``simple`` text search configuration indexes it without stemming, as the embedded
index does. Queries are built from quoted word terms (never ``websearch_to_tsquery`` or raw
``to_tsquery`` syntax from the caller) and passed as parameters.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from mediafleet.contract.bundle import EvidenceBundle
from mediafleet.discovery.index import AddReport, Nomination, StoredUnit, group_units
from mediafleet.discovery.units import Scope, Unit, units_from_bundle

__all__ = ["PostgresIndex"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS mf_discovery_scopes (
    workspace text NOT NULL, subject text NOT NULL, generation bigint NOT NULL,
    PRIMARY KEY (workspace, subject));
CREATE TABLE IF NOT EXISTS mf_discovery_artifacts (
    workspace text NOT NULL, subject text NOT NULL, digest text NOT NULL, action text NOT NULL,
    derivation_ref text NOT NULL, generation bigint NOT NULL,
    PRIMARY KEY (workspace, subject, digest, action));
CREATE TABLE IF NOT EXISTS mf_discovery_units (
    id bigserial PRIMARY KEY, workspace text NOT NULL, subject text NOT NULL, unit_id text NOT NULL,
    digest text NOT NULL, action text NOT NULL, derivation_ref text NOT NULL, generation bigint NOT NULL,
    active boolean NOT NULL, text text NOT NULL, folded text NOT NULL, source_range jsonb NOT NULL,
    tsv tsvector GENERATED ALWAYS AS (to_tsvector('simple'::regconfig, folded)) STORED,
    UNIQUE (workspace, subject, unit_id));
CREATE INDEX IF NOT EXISTS mf_discovery_units_by_artifact ON mf_discovery_units (workspace, subject, digest, action)
    WHERE active;
CREATE INDEX IF NOT EXISTS mf_discovery_units_tsv ON mf_discovery_units USING gin (tsv) WHERE active;
"""
_CONNECT_TIMEOUT_S = 10
_LOCK_KEY = 0x6D66_6473  # one advisory lock serialises schema creation across hosts


def tsquery_text(terms: list[str]) -> str:
    """``'t1' & 't2' …``: each term a quoted lexeme (terms are word characters; quotes doubled anyway)."""
    return " & ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


class PostgresIndex:
    """The index in a PostgreSQL database (psycopg 3)."""

    def __init__(self, conninfo: str) -> None:
        import psycopg

        # A bounded connect: the indexing hook runs as jobs finish and must not hang on a lost server.
        self._db = psycopg.connect(conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        self._lock = threading.Lock()
        with self._lock, self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            self._db.execute(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def add_bundle(self, scope: Scope, bundle: EvidenceBundle) -> AddReport:
        units = units_from_bundle(bundle)
        if not units:
            return AddReport(0, 0, self.scope_generation(scope))
        return self.add_units(scope, units)

    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport:
        digest, action, derivation = group_units(units)
        key = (scope.workspace, scope.subject, digest, action)
        where = "workspace = %s AND subject = %s AND digest = %s AND action = %s"
        with self._lock, self._db.transaction():
            db = self._db
            # The scope row is the lock every writer of the scope takes first.
            db.execute("INSERT INTO mf_discovery_scopes VALUES (%s, %s, 0) ON CONFLICT DO NOTHING",
                       (scope.workspace, scope.subject))
            db.execute("SELECT generation FROM mf_discovery_scopes WHERE workspace = %s AND subject = %s FOR UPDATE",
                       (scope.workspace, scope.subject))
            row = db.execute(f"SELECT derivation_ref, generation FROM mf_discovery_artifacts WHERE {where}",
                             key).fetchone()
            superseded = 0
            if row is None:
                generation = 1
                db.execute("INSERT INTO mf_discovery_artifacts VALUES (%s, %s, %s, %s, %s, %s)",
                           (*key, derivation, generation))
            elif row[0] != derivation:
                generation = int(row[1]) + 1
                superseded = db.execute(f"UPDATE mf_discovery_units SET active = false WHERE {where} AND active",
                                        key).rowcount
                db.execute(f"UPDATE mf_discovery_artifacts SET derivation_ref = %s, generation = %s WHERE {where}",
                           (derivation, generation, *key))
            else:
                generation = int(row[1])
            with db.cursor() as cur:
                cur.executemany(
                    "INSERT INTO mf_discovery_units (workspace, subject, unit_id, digest, action, derivation_ref, "
                    "generation, active, text, folded, source_range) VALUES (%s, %s, %s, %s, %s, %s, %s, true, %s, %s, "
                    "%s::jsonb) ON CONFLICT (workspace, subject, unit_id) DO UPDATE SET active = true, "
                    "generation = excluded.generation, derivation_ref = excluded.derivation_ref, text = excluded.text, "
                    "folded = excluded.folded, source_range = excluded.source_range "
                    "WHERE NOT mf_discovery_units.active",
                    [(scope.workspace, scope.subject, u.unit_id, digest, action, derivation, generation, u.text,
                      u.folded, u.source_json()) for u in units],
                )
                added = max(cur.rowcount, 0)
            if added or superseded:
                db.execute("UPDATE mf_discovery_scopes SET generation = generation + 1 WHERE workspace = %s AND "
                           "subject = %s", (scope.workspace, scope.subject))
            scope_generation = self._generation(scope)
        return AddReport(added, superseded, scope_generation)

    def _generation(self, scope: Scope) -> int:
        row = self._db.execute("SELECT generation FROM mf_discovery_scopes WHERE workspace = %s AND subject = %s",
                               (scope.workspace, scope.subject)).fetchone()
        return int(row[0]) if row else 0

    def scope_generation(self, scope: Scope) -> int:
        with self._lock:
            return self._generation(scope)

    def search(self, scope: Scope, terms: list[str], limit: int) -> list[Nomination]:
        if not terms or limit <= 0:
            return []
        with self._lock:
            rows = self._db.execute(
                "SELECT unit_id, derivation_ref, ts_rank(tsv, q) AS score FROM mf_discovery_units, "
                "to_tsquery('simple'::regconfig, %s) AS q WHERE active AND tsv @@ q AND workspace = %s AND "
                "subject = %s ORDER BY score DESC, id LIMIT %s",
                (tsquery_text(terms), scope.workspace, scope.subject, limit),
            ).fetchall()
        return [Nomination(uid, derivation, float(score)) for uid, derivation, score in rows]

    def load(self, scope: Scope, unit_ids: list[str]) -> dict[str, StoredUnit]:
        if not unit_ids:
            return {}
        with self._lock:
            rows = self._db.execute(
                "SELECT unit_id, digest, action, derivation_ref, generation, active, text, source_range "
                "FROM mf_discovery_units WHERE workspace = %s AND subject = %s AND unit_id = ANY(%s)",
                (scope.workspace, scope.subject, list(unit_ids)),
            ).fetchall()
        out: dict[str, StoredUnit] = {}
        for uid, digest, action, derivation, generation, active, text, source in rows:
            source_range: Any = source if isinstance(source, dict) else json.loads(source)
            unit = Unit(unit_id=uid, text=text, digest=digest, action=action, derivation_ref=derivation,
                        source_range=source_range)
            out[uid] = StoredUnit(unit=unit, scope=scope, active=bool(active), generation=int(generation))
        return out
