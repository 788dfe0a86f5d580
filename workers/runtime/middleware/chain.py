"""The fleet's chain of middleware, in order."""

from __future__ import annotations

from mediafleet.contract.manifest import Manifest
from mediafleet.workers.runtime.middleware.cancellation import Cancellation
from mediafleet.workers.runtime.middleware.counting import DeliveryCounting, DeliveryLimit
from mediafleet.workers.runtime.middleware.delivery import Middleware
from mediafleet.workers.runtime.middleware.device import DeviceHealth
from mediafleet.workers.runtime.middleware.outcome import DiscoveryIndexing, FinishedNotice, OutcomeReporting
from mediafleet.workers.runtime.middleware.progress import ProgressReporting, ProgressThrottle
from mediafleet.workers.runtime.middleware.release import ReleaseCheck

__all__ = ["fleet_middleware"]


def fleet_middleware(manifest: Manifest, discovery_index: str | None = None) -> list[Middleware]:
    """The fleet task's chain, in order. Cancellation comes after progress reporting (it reads the
    state that report returned) and before the delivery limit (a cancelled job ends ``cancelled``
    however often it was delivered); the release check after both (a cancelled job is cancelled,
    whoever took it); the finished notice comes last (with no index to fill, a plain job's is sent
    with its outcome's write instead); the device health check after it all."""
    return [DeliveryCounting(), ProgressThrottle(), ProgressReporting(hold_last=True), Cancellation(), DeliveryLimit(),
            ReleaseCheck(manifest), OutcomeReporting(manifest, announce=discovery_index is None),
            DiscoveryIndexing(discovery_index, manifest), FinishedNotice(), DeviceHealth()]
