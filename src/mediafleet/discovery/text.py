"""Text as the index matches it: NFKC and case folding, and a query reduced to plain terms.

A unit keeps its original text; only the folded copy is indexed. A unit matches a query when it
holds every word of the query (lexical, no stemming), ranked by BM25. A query is never passed to
FTS5 or to PostgreSQL as syntax: it is folded the same way and cut into word terms (Unicode
``\\w`` runs), and each backend quotes those terms itself, so ``"``, ``*``, ``NEAR``, ``OR``,
``:`` or ``'`` in a query are just text.
"""

from __future__ import annotations

import re
import unicodedata

from mediafleet.discovery.errors import DiscoveryError, Refusal

__all__ = ["MAX_QUERY_CHARS", "MAX_QUERY_TERMS", "fold", "query_terms"]

MAX_QUERY_CHARS = 2000
MAX_QUERY_TERMS = 32
_TERM = re.compile(r"\w+")


def fold(text: str) -> str:
    """NFKC, case-folded, NFKC again (case folding can leave a string that is not NFKC)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def query_terms(query: str) -> list[str]:
    """The distinct word terms of a query, in order.

    Raises:
        DiscoveryError: the query is empty, longer than ``MAX_QUERY_CHARS`` characters, has more
            than ``MAX_QUERY_TERMS`` distinct terms, or holds no word at all.
    """
    if not query.strip():
        raise DiscoveryError(Refusal.INVALID_REQUEST, "query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"query is longer than {MAX_QUERY_CHARS} characters")
    terms = list(dict.fromkeys(_TERM.findall(fold(query))))
    if not terms:
        raise DiscoveryError(Refusal.INVALID_REQUEST, "query has no words to search for")
    if len(terms) > MAX_QUERY_TERMS:
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"query has more than {MAX_QUERY_TERMS} distinct words")
    return terms
