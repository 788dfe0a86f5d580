"""Text as the index matches it: NFKC and case folding, the normaliser, and a query reduced to plain terms.

A unit keeps its original text; only the matched copy (:func:`matched_form`: folded, then
:func:`mediafleet.discovery.normalise.normalise`) is indexed. A query goes through the same two
steps and is cut into its distinct word terms; it is never passed to FTS5 or to PostgreSQL as
syntax: each backend quotes those terms itself, so ``"``, ``*``, ``NEAR``, ``OR``, ``:`` or ``'``
in a query are just text.
"""

from __future__ import annotations

import unicodedata

from mediafleet.discovery.errors import DiscoveryError, Refusal
from mediafleet.discovery.normalise import normalise, tokens

__all__ = ["MAX_QUERY_CHARS", "MAX_QUERY_TERMS", "fold", "matched_form", "query_terms"]

MAX_QUERY_CHARS = 2000
MAX_QUERY_TERMS = 32


def fold(text: str) -> str:
    """NFKC, case-folded, NFKC again (case folding can leave a string that is not NFKC)."""
    return unicodedata.normalize("NFKC", unicodedata.normalize("NFKC", text).casefold())


def matched_form(text: str) -> str:
    """What the index matches for ``text``: folded, normalised, its word tokens joined by spaces."""
    return normalise(fold(text))


def query_terms(query: str) -> list[str]:
    """The distinct word terms of a query, in order, folded and normalised as units are.

    Raises:
        DiscoveryError: the query is empty, longer than ``MAX_QUERY_CHARS`` characters, has more
            than ``MAX_QUERY_TERMS`` distinct terms, or holds no word at all.
    """
    if not query.strip():
        raise DiscoveryError(Refusal.INVALID_REQUEST, "query is empty")
    if len(query) > MAX_QUERY_CHARS:
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"query is longer than {MAX_QUERY_CHARS} characters")
    terms = list(dict.fromkeys(tokens(fold(query))))
    if not terms:
        raise DiscoveryError(Refusal.INVALID_REQUEST, "query has no words to search for")
    if len(terms) > MAX_QUERY_TERMS:
        raise DiscoveryError(Refusal.INVALID_REQUEST, f"query has more than {MAX_QUERY_TERMS} distinct words")
    return terms
