"""The release check: a job named by another release of the extractors is not run here."""

from __future__ import annotations

import logging
from collections.abc import Callable
from datetime import datetime

from mediafleet.contract.errors import ErrorCode, MediafleetError, PublicError
from mediafleet.contract.jobs import Outcome
from mediafleet.contract.manifest import Manifest
from mediafleet.workers.parts import named_job_id
from mediafleet.workers.runtime.middleware.delivery import Delivery, Middleware, utc_now

__all__ = ["ReleaseCheck"]

log = logging.getLogger("mediafleet.worker")


class ReleaseCheck(Middleware):
    """Runs a job only where this release names it as its request does (:func:`named_job_id`).

    A job id names the extractor version and the recipe of the release that named it. A worker of
    another release (in a rolling upgrade) would run its own extractors under that id, and every
    resubmission would then be answered with that other version's evidence. Such a delivery is
    failed, retryably (``engine_unavailable``): once the fleet runs one release, a resubmission runs.
    """

    def __init__(self, manifest: Manifest, clock: Callable[[], datetime] = utc_now) -> None:
        self._manifest = manifest
        self._clock = clock

    def before_run(self, delivery: Delivery) -> Outcome | None:
        try:
            named = named_job_id(delivery.request, self._manifest)
        except MediafleetError:
            return None  # an action the manifest in force does not declare: the runner refuses it
        if named == delivery.request.job_id:
            return None
        log.warning("job %s was named by another release than this worker's; not run", delivery.request.job_id)
        return Outcome.failed(delivery.request, PublicError(
            code=ErrorCode.ENGINE_UNAVAILABLE, retryable=True,
            message="the job was named by a dispatcher of another mediafleet release than this worker's (their "
                    "extractors differ); run dispatchers and workers of one release; it can be submitted again",
        ), self._clock())
