"""Device health: a worker whose GPU failed for good stops itself."""

from __future__ import annotations

from mediafleet.contract.jobs import Outcome
from mediafleet.workers.engines import broken_device
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware

__all__ = ["DeviceHealth"]


class DeviceHealth(Middleware):
    """Stops the worker once its GPU has failed for good (:func:`mediafleet.workers.engines.broken_device`:
    a CUDA error, a GPU library that cannot be loaded), after this delivery's outcome is reported.

    Each such job fails retryably, but a worker left running would take every job its class is
    routed and fail it the same way. Stopped, it leaves the fleet's routing (its presence is
    retired), its prefetched messages go back to the queue, and its supervisor starts a fresh
    process, with a fresh CUDA context."""

    def __init__(self) -> None:
        self._retiring = False

    def after_run(self, delivery: Delivery, outcome: Outcome) -> None:
        if (why := broken_device()) is not None and not self._retiring:
            self._retiring = True
            delivery.retire(why)
