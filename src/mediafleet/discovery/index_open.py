"""Which index a URL names (``sqlite:PATH`` or ``postgresql://...``), and opening it."""

from __future__ import annotations

from pathlib import Path

from mediafleet.discovery.index import EvidenceIndex
from mediafleet.discovery.ranking import DEFAULT_RULE, RankingRule

__all__ = ["open_index", "parse_index_url"]


def parse_index_url(url: str) -> tuple[str, str]:
    """``(kind, target)``: ``("sqlite", path)`` or ``("postgresql", conninfo URL)``.

    Raises:
        ValueError: any other form.
    """
    if url.startswith(("postgresql://", "postgres://")):
        return "postgresql", url
    if url.startswith("sqlite:"):
        path = url.removeprefix("sqlite:")
        if path.startswith("//"):
            path = path[2:]
            if not path.startswith("/"):
                raise ValueError("sqlite:///PATH takes an absolute path")
        if not path:
            raise ValueError("sqlite: needs a file path")
        return "sqlite", path
    raise ValueError("an index URL is sqlite:PATH or postgresql://...")


def open_index(url: str, rule: RankingRule = DEFAULT_RULE) -> EvidenceIndex:
    """Open (creating the schema when missing) the index ``url`` names, searching under ``rule``."""
    kind, target = parse_index_url(url)
    if kind == "sqlite":
        from mediafleet.discovery.index_sqlite import SqliteIndex

        return SqliteIndex(Path(target).expanduser(), rule)
    from mediafleet.discovery.index_pg import PostgresIndex

    return PostgresIndex(target, rule)
