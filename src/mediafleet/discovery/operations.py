"""The model's two operations, under the host's authority: ``discovery-search`` and ``discovery-inspect``.

Order, for each call: the request is checked (exactly its two fields); the credential and the
lease are checked and one operation is counted, durably; the host's authorization callback is
asked before nomination; the channels nominate unit ids only (lexical; with ``semantic`` on, the
nearest vectors too, lexical's nominations first and then the semantic ones); each nominated unit is
reloaded from the index and delivered only if it is still active, in the lease's scope and of the
nominated generation, and the scope's generation is still the one the lease pinned; the units are
packed into what is left of the budget (what does not fit is counted in ``omitted_count``); the
callback is asked again with the ids about to be delivered; the encrypted receipt is persisted
with the delivery; then the answer is returned. Any failure after the reservation leaves the
operation counted and failed; nothing is retried.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from mediafleet.contract.locus import is_opaque_ref
from mediafleet.discovery.answer import answer, evidence_object
from mediafleet.discovery.errors import DiscoveryError, Refusal
from mediafleet.discovery.host import Binding, LeaseHost, Reservation
from mediafleet.discovery.index import EvidenceIndex, Nomination, StoredUnit
from mediafleet.discovery.index_base import held_terms
from mediafleet.discovery.receipt import ReceiptKey
from mediafleet.discovery.text import query_terms
from mediafleet.discovery.units import text_digest

__all__ = ["CHANNELS", "NOMINATION_LIMIT", "AuthorizationRequest", "Authorizer", "DiscoveryService",
           "allow_active_bindings", "fuse", "parse_channels"]

log = logging.getLogger("mediafleet.discovery")

NOMINATION_LIMIT = 20
CHANNELS = ("lexical", "semantic")


def parse_channels(text: str) -> tuple[str, ...]:
    """``lexical`` or ``lexical,semantic`` (the ``MEDIAFLEET_DISCOVERY_CHANNELS`` form).

    Raises:
        ValueError: an unknown channel, or a list without ``lexical``.
    """
    names = tuple(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    if not names or any(n not in CHANNELS for n in names) or "lexical" not in names:
        raise ValueError("the discovery channels are lexical or lexical,semantic")
    return tuple(n for n in CHANNELS if n in names)


def fuse(lists: dict[str, list[Nomination]], limit: int) -> list[tuple[Nomination, tuple[str, ...]]]:
    """The channels' nominations in one list, best first, with the channels that nominated each.

    Lexical nominations come first, in lexical's order: each holds every word of the query or more than
    half of them (a partial match), which the semantic channel, with no floor, never establishes. The
    semantic channel's nominations that lexical did not make follow in its order, up to ``limit``. A
    unit both channels nominated keeps its lexical place and says both. (Reciprocal rank fusion, the
    first rule, let a semantic nomination push a unit holding the query's words out of the first places:
    one-word-off queries fell from 90.0% to 81.3% recall@3 on the benchmark's held-out set.)
    """
    by: dict[str, list[str]] = {}
    first: dict[str, Nomination] = {}
    for channel in CHANNELS:
        for nomination in lists.get(channel, []):
            first.setdefault(nomination.unit_id, nomination)
            by.setdefault(nomination.unit_id, []).append(channel)
    return [(first[uid], tuple(by[uid])) for uid in list(first)[:limit]]


@dataclass(frozen=True)
class AuthorizationRequest:
    """What the host's callback is asked: may this binding's operation go on at this stage?"""

    stage: Literal["nominate", "deliver"]
    binding: Binding
    lease_id: str
    request_id: str
    tool: str
    unit_ids: tuple[str, ...]  # deliver: the ids about to be delivered; nominate (inspect): the id asked for


Authorizer = Callable[[AuthorizationRequest], bool]
Fused = tuple[Nomination, tuple[str, ...]]  # a nomination and the channels that nominated it


def allow_active_bindings(request: AuthorizationRequest) -> bool:
    """The CLI's callback: the lease store has already refused disabled bindings and revoked or
    expired leases; a host embedding the service supplies its own, live policy."""
    return not request.binding.disabled


class DiscoveryService:
    """The two operations over one lease store, one index and one receipt key.

    Args:
        host: the lease store.
        index: the evidence index (SQLite or PostgreSQL).
        key: the receipt key.
        authorize: the host's live authorization callback; anything but ``True`` refuses.
        nomination_limit: how many units a search nominates (each channel nominates as many, then fused).
        channels: ``("lexical",)`` (the default) or ``("lexical", "semantic")``.

    Raises:
        ValueError: an unknown channel list.
        ImportError: the semantic channel without its model (``wordllama``).
    """

    def __init__(self, host: LeaseHost, index: EvidenceIndex, key: ReceiptKey, authorize: Authorizer,
                 *, nomination_limit: int = NOMINATION_LIMIT, channels: tuple[str, ...] = ("lexical",)) -> None:
        self.host, self.index, self.key, self._authorize = host, index, key, authorize
        self.nomination_limit = nomination_limit
        self.channels = parse_channels(",".join(channels))
        if "semantic" in self.channels:
            from mediafleet.discovery.embedding import default_embedder

            default_embedder()  # a semantic host without its model refuses to start, never falls back

    def search(self, credential: str, lease_id: str, query: str) -> dict[str, Any]:
        """``discovery-search``: lexical search of the lease's scope.

        Raises:
            DiscoveryError: every refusal, public-safe.
        """
        terms = query_terms(query)
        reservation = self.host.reserve(credential, lease_id, "discovery-search")

        def nominate(scope: Any) -> list[tuple[Nomination, tuple[str, ...]]]:
            lists = {"lexical": self.index.search(scope, terms, self.nomination_limit)}
            if "semantic" in self.channels:
                lists["semantic"] = self.index.nearest(scope, query, self.nomination_limit)
            return fuse(lists, self.nomination_limit)

        return self._run(reservation, credential, query_digest=text_digest(query), nominate=nominate, terms=terms)

    def inspect(self, credential: str, lease_id: str, unit_id: str) -> dict[str, Any]:
        """``discovery-inspect``: one unit of the lease's scope, by id.

        Raises:
            DiscoveryError: every refusal, public-safe.
        """
        if not (isinstance(unit_id, str) and unit_id.startswith("eg:locus:") and is_opaque_ref(unit_id)):
            raise DiscoveryError(Refusal.UNIT_NOT_FOUND)
        reservation = self.host.reserve(credential, lease_id, "discovery-inspect")

        def nominate(scope: Any) -> list[tuple[Nomination, tuple[str, ...]]]:
            stored = self.index.load(scope, [unit_id]).get(unit_id)
            if stored is None or not stored.active:
                raise DiscoveryError(Refusal.UNIT_NOT_FOUND)
            return [(Nomination(unit_id, stored.unit.derivation_ref, 0.0), ())]

        return self._run(reservation, credential, unit_id=unit_id, nominate=nominate)

    # -- the shared body ------------------------------------------------------------------------

    def _ask(self, reservation: Reservation, stage: Literal["nominate", "deliver"], unit_ids: tuple[str, ...]) -> None:
        request = AuthorizationRequest(stage, reservation.binding, reservation.lease.lease_id, reservation.request_id,
                                       reservation.tool, unit_ids)
        if self._authorize(request) is not True:
            raise DiscoveryError(Refusal.NOT_AUTHORIZED)

    def _same_generation(self, reservation: Reservation) -> None:
        if self.index.scope_generation(reservation.binding.scope) != reservation.lease.generation:
            raise DiscoveryError(Refusal.GENERATION_CHANGED)

    def _run(self, reservation: Reservation, credential: str, *, nominate: Callable[[Any], list[Fused]],
             query_digest: str | None = None, unit_id: str | None = None,
             terms: list[str] | None = None) -> dict[str, Any]:
        try:
            return self._prepare(reservation, credential, nominate, query_digest, unit_id, terms)
        except DiscoveryError as exc:
            self.host.fail(reservation, exc.code)
            raise
        except Exception as exc:  # noqa: BLE001 - the boundary: a public error, the operation stays counted
            log.warning("%s %s failed: %s", reservation.tool, reservation.request_id, type(exc).__name__)
            self.host.fail(reservation, Refusal.INTERNAL_ERROR)
            raise DiscoveryError(Refusal.INTERNAL_ERROR) from None

    def _prepare(self, reservation: Reservation, credential: str, nominate: Callable[[Any], list[Fused]],
                 query_digest: str | None, unit_id: str | None, terms: list[str] | None) -> dict[str, Any]:
        scope = reservation.binding.scope
        lease = reservation.lease
        self._ask(reservation, "nominate", (unit_id,) if unit_id else ())
        self._same_generation(reservation)
        fused = nominate(scope)
        nominated_by = {n.unit_id: channels for n, channels in fused}
        nominations = [n for n, _ in fused]
        stored = self.index.load(scope, [n.unit_id for n in nominations])
        units: list[StoredUnit] = []
        for nomination in nominations:
            unit = stored.get(nomination.unit_id)
            if unit is None or not unit.active or unit.scope != scope:
                raise DiscoveryError(Refusal.GENERATION_CHANGED)
            if unit.unit.derivation_ref != nomination.derivation_ref:
                raise DiscoveryError(Refusal.GENERATION_CHANGED)
            units.append(unit)
        self._same_generation(reservation)
        evidence_left = lease.budget.evidence - lease.evidence_used
        characters_left = lease.budget.characters - lease.characters_used
        delivered: list[StoredUnit] = []
        for unit in units:
            size = len(unit.unit.text)
            if len(delivered) < evidence_left and size <= characters_left:
                delivered.append(unit)
                characters_left -= size
        omitted = len(units) - len(delivered)
        self._ask(reservation, "deliver", tuple(u.unit.unit_id for u in delivered))
        evidence = [evidence_object(u) if terms is None else
                    evidence_object(u, matched_terms=held_terms(terms, u.unit.folded),
                                    nominated_by=nominated_by[u.unit.unit_id]) for u in delivered]
        characters = sum(len(u.unit.text) for u in delivered)
        body = {
            "request_id": reservation.request_id, "lease_id": lease.lease_id, "binding_id": reservation.binding.binding_id,
            "tool": reservation.tool, "generation": lease.generation, "query_sha256": query_digest,
            "unit_id_asked": unit_id, "omitted_count": omitted, "operations_used": lease.operations_used,
            "prepared": [{"unit_id": e["unit_id"], "text_digest": e["text_digest"],
                          "artifact_digest": e["source_range"]["artifact_digest"],
                          "derivation_ref": e["source_range"]["derivation_ref"],
                          "locus_kind": e["source_range"]["locus_kind"]} for e in evidence],
        }
        sealed = self.key.seal(reservation.request_id, lease.lease_id, body)
        self.host.commit(reservation, credential, sealed, len(delivered), characters)
        channels = list(self.channels) if terms is not None else ["lexical"]
        return answer(reservation.request_id, lease.generation, evidence, omitted, lease.operations_used,
                      channels=channels)
