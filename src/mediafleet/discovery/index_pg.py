"""The evidence index on PostgreSQL: full-text search with a stored tsvector and a GIN index.

For several hosts sharing one index. Text is folded (NFKC, case folding) in Python before it is
stored, and the ``simple`` text search configuration indexes it without stemming, as the embedded
index does. Queries are built from quoted word terms (never ``websearch_to_tsquery`` or raw
``to_tsquery`` syntax from the caller) and passed as parameters.

A search follows :mod:`mediafleet.discovery.ranking`, ranked by ``ts_rank`` (no IDF: words weigh
alike by construction). Whether a word is very common is read from ``mf_discovery_terms``, the
number of the scope's active units holding each lexeme, kept in the transaction that changes the
units (counting matches instead visits a heap row per match: ~40 ms for a word in 2% of a
million units); a word that is not one lexeme is counted by a match read to its
``common_units + 1``-th row. When every word is very common, the units last indexed are read
backwards along an index of the scope's active units by id.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from mediafleet.discovery.index import AddReport, Nomination, group_units
from mediafleet.discovery.index_base import IndexBase
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule
from mediafleet.discovery.units import Scope, Unit

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
CREATE INDEX IF NOT EXISTS mf_discovery_units_newest ON mf_discovery_units (workspace, subject, id) WHERE active;
ALTER TABLE mf_discovery_units ADD COLUMN IF NOT EXISTS vector bytea;
"""
_TERMS = """
CREATE TABLE mf_discovery_terms (
    workspace text NOT NULL, subject text NOT NULL, lexeme text NOT NULL, units bigint NOT NULL,
    PRIMARY KEY (workspace, subject, lexeme));
INSERT INTO mf_discovery_terms SELECT workspace, subject, lexeme, count(*) FROM mf_discovery_units,
    unnest(tsvector_to_array(tsv)) AS lexeme WHERE active GROUP BY workspace, subject, lexeme;
"""
# Adds ``sign`` for each lexeme of the units with these ids (every one in the scope being written).
_COUNT_TERMS = """
INSERT INTO mf_discovery_terms (workspace, subject, lexeme, units)
SELECT %s, %s, lexeme, %s * count(*) FROM mf_discovery_units, unnest(tsvector_to_array(tsv)) AS lexeme
WHERE id = ANY(%s) GROUP BY lexeme
ON CONFLICT (workspace, subject, lexeme) DO UPDATE SET units = mf_discovery_terms.units + excluded.units
"""
_CONNECT_TIMEOUT_S = 10
_LOCK_KEY = 0x6D66_6473  # one advisory lock serialises schema creation across hosts


def tsquery_text(terms: list[str]) -> str:
    """``'t1' & 't2' …``: each term a quoted lexeme (terms are word characters; quotes doubled anyway)."""
    return " & ".join("'" + t.replace("\\", "\\\\").replace("'", "''") + "'" for t in terms)


_SCOPE = "active AND workspace = %s AND subject = %s"
_QUERY = "to_tsquery('simple'::regconfig, %s)"


class PostgresIndex(IndexBase):
    """The index in a PostgreSQL database (psycopg 3).

    Args:
        conninfo: the ``postgresql://`` URL.
        rule: the ranking rule (:mod:`mediafleet.discovery.ranking`).
    """

    def __init__(self, conninfo: str, rule: RankingRule = DEFAULT_RULE) -> None:
        import psycopg

        super().__init__(rule)
        # A bounded connect: the indexing hook runs as jobs finish and must not hang on a lost server.
        self._db = psycopg.connect(conninfo, autocommit=True, connect_timeout=_CONNECT_TIMEOUT_S)
        with self._lock, self._db.transaction():
            self._db.execute("SELECT pg_advisory_xact_lock(%s)", (_LOCK_KEY,))
            self._db.execute(_SCHEMA)
            # An index made before the term counts gets them once, from its active units.
            if self._db.execute("SELECT to_regclass('mf_discovery_terms') IS NULL").fetchone()[0]:
                self._db.execute(_TERMS)

    def _close(self) -> None:
        self._db.close()

    def add_units(self, scope: Scope, units: list[Unit]) -> AddReport:
        digest, action, derivation = group_units(units)
        key = (scope.workspace, scope.subject, digest, action)
        where = "workspace = %s AND subject = %s AND digest = %s AND action = %s"
        vectors = self._embed(units)
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
                gone = [r[0] for r in db.execute(f"UPDATE mf_discovery_units SET active = false WHERE {where} AND "
                                                 "active RETURNING id", key)]
                superseded = len(gone)
                if gone:
                    db.execute(_COUNT_TERMS, (scope.workspace, scope.subject, -1, gone))
                db.execute(f"UPDATE mf_discovery_artifacts SET derivation_ref = %s, generation = %s WHERE {where}",
                           (derivation, generation, *key))
            else:
                generation = int(row[1])
            with db.cursor() as cur:
                cur.executemany(
                    "INSERT INTO mf_discovery_units (workspace, subject, unit_id, digest, action, derivation_ref, "
                    "generation, active, text, folded, source_range, vector) VALUES (%s, %s, %s, %s, %s, %s, %s, true, "
                    "%s, %s, %s::jsonb, %s) ON CONFLICT (workspace, subject, unit_id) DO UPDATE SET active = true, "
                    "generation = excluded.generation, derivation_ref = excluded.derivation_ref, text = excluded.text, "
                    "folded = excluded.folded, source_range = excluded.source_range, vector = excluded.vector "
                    "WHERE NOT mf_discovery_units.active RETURNING id",
                    [(scope.workspace, scope.subject, u.unit_id, digest, action, derivation, generation, u.text,
                      u.folded, u.source_json(), vector) for u, vector in zip(units, vectors, strict=True)],
                    returning=True,
                )
                new = []
                while True:
                    new += [r[0] for r in cur.fetchall()]
                    if not cur.nextset():
                        break
            added = len(new)
            if new:
                db.execute(_COUNT_TERMS, (scope.workspace, scope.subject, 1, new))
            if added or superseded:
                db.execute("UPDATE mf_discovery_scopes SET generation = generation + 1 WHERE workspace = %s AND "
                           "subject = %s", (scope.workspace, scope.subject))
            scope_generation = self._generation(scope)
        return AddReport(added, superseded, scope_generation)

    def _generation(self, scope: Scope) -> int:
        row = self._db.execute("SELECT generation FROM mf_discovery_scopes WHERE workspace = %s AND subject = %s",
                               (scope.workspace, scope.subject)).fetchone()
        return int(row[0]) if row else 0

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        with self._db.transaction():
            self._db.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield

    def _has_scope(self, scope: Scope) -> bool:
        return True  # a scope never written has no rows: every query below finds nothing

    def _held_by_more_than(self, scope: Scope, term: str, count: int) -> bool:
        query = tsquery_text([term])
        lexemes, nodes = self._db.execute(
            f"SELECT tsvector_to_array(to_tsvector('simple'::regconfig, %s)), numnode({_QUERY})",
            (term, query)).fetchone()
        if nodes == 1 and len(lexemes) == 1:
            row = self._db.execute("SELECT units FROM mf_discovery_terms WHERE workspace = %s AND subject = %s "
                                   "AND lexeme = %s", (scope.workspace, scope.subject, lexemes[0])).fetchone()
            return row is not None and int(row[0]) > count
        return self._db.execute(
            f"SELECT 1 FROM mf_discovery_units WHERE {_SCOPE} AND tsv @@ {_QUERY} OFFSET %s LIMIT 1",
            (scope.workspace, scope.subject, query, count), prepare=False).fetchone() is not None

    def _rank(self, scope: Scope, terms: tuple[str, ...], ranked_by: tuple[str, ...],
              limit: int) -> list[Nomination]:
        rows = self._db.execute(
            f"SELECT unit_id, derivation_ref, ts_rank(tsv, {_QUERY}) AS score FROM mf_discovery_units "
            f"WHERE {_SCOPE} AND tsv @@ {_QUERY} ORDER BY score DESC, id LIMIT %s",
            (tsquery_text(list(ranked_by)), scope.workspace, scope.subject, tsquery_text(list(terms)), limit),
            prepare=False,
        ).fetchall()
        return [Nomination(uid, derivation, float(score)) for uid, derivation, score in rows]

    def _rank_newest(self, scope: Scope, terms: tuple[str, ...], candidates: int, limit: int) -> list[Nomination]:
        query = tsquery_text(list(terms))
        rows = self._db.execute(
            "SELECT unit_id, derivation_ref, ts_rank(tsv, q) AS score FROM "
            f"(SELECT id, unit_id, derivation_ref, tsv FROM mf_discovery_units WHERE {_SCOPE} AND tsv @@ {_QUERY} "
            f"ORDER BY id DESC LIMIT %s) AS newest, {_QUERY} AS q ORDER BY score DESC, id LIMIT %s",
            (scope.workspace, scope.subject, query, candidates, query, limit),
            prepare=False,  # a plan for these words, never a generic one (a GIN scan of every match)
        ).fetchall()
        return [Nomination(uid, derivation, float(score)) for uid, derivation, score in rows]

    def _rank_partial(self, scope: Scope, groups: tuple[tuple[str, ...], ...], ranked_by: tuple[str, ...],
                      candidates: int) -> list[tuple[Nomination, str]]:
        # The GIN index finds the units holding a whole group (an intersection, not every unit holding any
        # rarer word); only those are ranked, by ts_rank over the rarer words.
        match = " | ".join("(" + tsquery_text(list(g)) + ")" for g in groups)
        rank = " | ".join(tsquery_text([t]) for t in ranked_by)
        rows = self._db.execute(
            f"SELECT unit_id, derivation_ref, ts_rank(tsv, {_QUERY}) AS score, folded FROM mf_discovery_units "
            f"WHERE {_SCOPE} AND tsv @@ {_QUERY} ORDER BY score DESC, id LIMIT %s",
            (rank, scope.workspace, scope.subject, match, candidates), prepare=False,
        ).fetchall()
        return [(Nomination(uid, derivation, float(score)), text) for uid, derivation, score, text in rows]

    def _vector_rows(self, scope: Scope) -> Iterable[tuple[str, str, bytes]]:
        return self._db.execute(
            "SELECT unit_id, derivation_ref, vector FROM mf_discovery_units WHERE active AND workspace = %s AND "
            "subject = %s AND vector IS NOT NULL ORDER BY id", (scope.workspace, scope.subject)).fetchall()

    def _unit_rows(self, scope: Scope, unit_ids: list[str]) -> Iterable[tuple[Any, ...]]:
        return self._db.execute(
            "SELECT unit_id, digest, action, derivation_ref, generation, active, text, source_range "
            "FROM mf_discovery_units WHERE workspace = %s AND subject = %s AND unit_id = ANY(%s)",
            (scope.workspace, scope.subject, list(unit_ids)),
        ).fetchall()
