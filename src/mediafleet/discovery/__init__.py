"""Evidence discovery v1: search the fleet's evidence under a trusted host's authority.

The host (trusted, never model-callable) indexes bundles into a scope, opens a lease for one
binding and turn with a navigation budget, supplies an authorization callback, and revokes or
disables. The model can call two operations, each with exactly two fields: ``discovery-search``
(``lease_id``, ``query``) and ``discovery-inspect`` (``lease_id``, ``unit_id``), and gets the
``atmem-evidence-discovery-v1`` object back, after the host has persisted an encrypted receipt.
"""

from mediafleet.discovery.answer import ANSWER_FORMAT, answer, evidence_object
from mediafleet.discovery.errors import DiscoveryError, Refusal
from mediafleet.discovery.host import Binding, Lease, LeaseHost, NavigationBudget
from mediafleet.discovery.index import AddReport, EvidenceIndex, Nomination, StoredUnit
from mediafleet.discovery.index_open import open_index
from mediafleet.discovery.operations import AuthorizationRequest, Authorizer, DiscoveryService
from mediafleet.discovery.ranking import RankingRule
from mediafleet.discovery.receipt import RECEIPT_FORMAT, ReceiptKey, create_key_file
from mediafleet.discovery.units import Scope, Unit, units_from_bundle

__all__ = [
    "ANSWER_FORMAT",
    "RECEIPT_FORMAT",
    "AddReport",
    "AuthorizationRequest",
    "Authorizer",
    "Binding",
    "DiscoveryError",
    "DiscoveryService",
    "EvidenceIndex",
    "Lease",
    "LeaseHost",
    "NavigationBudget",
    "Nomination",
    "RankingRule",
    "ReceiptKey",
    "Refusal",
    "Scope",
    "StoredUnit",
    "Unit",
    "answer",
    "create_key_file",
    "evidence_object",
    "open_index",
    "units_from_bundle",
]
