"""The retention rule for blobs and results, and :func:`collect_garbage` (``mediafleet gc``).

The rule, for both blob stores:

* **Results** expire by themselves in Redis: Celery's after ``result_ttl_s``, the fleet's job
  records after the job's pickup window (never less than ``result_ttl_s``) from the moment it
  finished. As a backstop, gc gives any result key it finds without an expiry
  (``celery-task-meta-*``, ``mediafleet:job:*``) one of ``result_ttl_s``, so nothing grows forever.
* **Blobs** (artifacts and what extractors derived from them) are deleted when both hold:

  1. nobody has stored or read the blob for ``result_ttl_s`` + the manifest's longest hard time
     limit + :data:`~mediafleet.blobs.s3.REFRESH_S` (one hour). Every store and every read
     refreshes the blob's last-use stamp: the file's mtime in the local store, the object's
     ``LastModified`` in S3 (by an in-place copy, at most once an hour, hence the hour of slack).
     A worker reads the artifact when the job starts and writes derived blobs while it runs; the
     job ends at most one hard time limit later and its result lives ``result_ttl_s`` from then,
     so a blob outlives every Celery result that names it.
  2. no live job record or result in the result backend mentions its digest. This keeps the
     artifacts of jobs still queued (however long the wait) and the blobs of results whose caller
     asked for a pickup window longer than ``result_ttl_s``. An outcome too large to keep in its
     record (:data:`~mediafleet.fleet.store.INLINE_OUTCOME_MAX_BYTES`) is a blob its record names
     (``outcome_ref``), so it is kept for as long as the record lives (the job's pickup window);
     one that lost the race to finish a record is named by none and goes by rule 1 alone.

* **Temporary files** (partial writes, downloads spooled for verification) untouched for the
  longest hard time limit + 10 minutes belong to a process that died, and are removed.

gc re-checks each blob's stamp just before deleting it, so a blob stored again during the sweep
stays. It fails closed: when the result backend cannot be read, no blob is deleted. Run it from
cron or a Kubernetes CronJob (daily is plenty); on S3 a bucket lifecycle rule that expires objects
under the prefix after the same window implements rule 1 alone (not rule 2), so prefer gc.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from typing import Any

from mediafleet.contract.digests import DIGEST_BYTES
from mediafleet.contract.errors import Phase, Unavailable
from mediafleet.contract.manifest import Manifest
from mediafleet.blobs.local import BlobStore, open_store
from mediafleet.blobs.s3 import REFRESH_S
from mediafleet.settings import Settings

__all__ = ["GcReport", "Retention", "collect_garbage", "expire_results", "gc", "live_references"]

RESULT_PATTERNS = ("celery-task-meta-*", "mediafleet:job:*")
_TEMP_MARGIN_S = 600
# Atomic, so a pickup window set by the job store at the same moment is never shortened.
_EXPIRE_IF_PERSISTENT = (
    "if redis.call('TTL', KEYS[1]) == -1 then return redis.call('EXPIRE', KEYS[1], ARGV[1]) end return 0"
)


@dataclass(frozen=True)
class Retention:
    """The windows in force, in seconds."""

    blob_s: int
    temp_s: int
    result_ttl_s: int

    @classmethod
    def from_settings(cls, settings: Settings, manifest: Manifest) -> Retention:
        longest = math.ceil(manifest.max_hard_time_limit_s())
        return cls(blob_s=settings.result_ttl_s + longest + REFRESH_S, temp_s=longest + _TEMP_MARGIN_S,
                   result_ttl_s=settings.result_ttl_s)


@dataclass
class GcReport:
    """What one sweep found and did (in a dry run: what it would have deleted)."""

    dry_run: bool
    blob_cutoff: datetime
    blobs_seen: int = 0
    blobs_deleted: int = 0
    bytes_deleted: int = 0
    blobs_referenced: int = 0
    """past the window but kept: a live job record or result names them"""
    temp_deleted: int | None = None
    """None in a dry run"""
    results_expired: int | None = None
    """result keys given an expiry; None when there is no Redis result backend"""

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "blob_cutoff": self.blob_cutoff.isoformat()}


def _redis_call(fn: Any, *args: Any, **kwargs: Any) -> Any:
    from redis.exceptions import RedisError

    try:
        return fn(*args, **kwargs)
    except RedisError as exc:
        raise Unavailable("the result backend cannot be reached", phase=Phase.DISPATCH) from exc


def _keys(client: Any) -> list[Any]:
    return [key for pattern in RESULT_PATTERNS
            for key in _redis_call(lambda p=pattern: list(client.scan_iter(match=p, count=1000)))]


def live_references(client: Any) -> set[str]:
    """Every ``sha256:<hex>`` named by a live job record or result in the result backend."""
    found: set[str] = set()
    for key in _keys(client):
        kind = _redis_call(client.type, key)
        values: Iterable[Any]
        if kind in (b"hash", "hash"):
            values = _redis_call(client.hvals, key)
        elif kind in (b"string", "string"):
            values = [_redis_call(client.get, key)]
        else:
            continue
        for value in values:
            if isinstance(value, str):
                value = value.encode()
            if value:
                found.update(m.decode() for m in DIGEST_BYTES.findall(value))
    return found


def expire_results(client: Any, ttl_s: int, *, dry_run: bool = False) -> int:
    """Give result keys that have no expiry one of ``ttl_s`` seconds; return how many."""
    if dry_run:
        return sum(1 for key in _keys(client) if _redis_call(client.ttl, key) == -1)
    script = client.register_script(_EXPIRE_IF_PERSISTENT)
    return sum(int(_redis_call(script, keys=[key], args=[ttl_s])) for key in _keys(client))


def collect_garbage(
    store: BlobStore,
    retention: Retention,
    *,
    now: datetime,
    redis: Any = None,
    dry_run: bool = False,
) -> GcReport:
    """Apply the retention rule once to ``store`` (and the result backend ``redis``, if any).

    Args:
        store: the blob store to sweep.
        retention: the windows (:meth:`Retention.from_settings`).
        now: the time the windows count back from.
        redis: a Redis client on the result backend; None when results are not kept in Redis
            (in-process use), in which case only the time rule applies.
        dry_run: count what would be deleted, delete nothing.

    Raises:
        Unavailable: the store or the result backend cannot be reached (nothing more is deleted).
    """
    cutoff = now - timedelta(seconds=retention.blob_s)
    report = GcReport(dry_run=dry_run, blob_cutoff=cutoff)
    referenced: set[str] = set()
    if redis is not None:
        report.results_expired = expire_results(redis, retention.result_ttl_s, dry_run=dry_run)
        # Read the references before listing blobs: a job submitted after this point stores its
        # artifact first, which refreshes the stamp that delete_idle re-checks.
        referenced = live_references(redis)
    for blob in store.blobs():
        report.blobs_seen += 1
        if blob.last_used >= cutoff:
            continue
        if blob.digest in referenced:
            report.blobs_referenced += 1
            continue
        if dry_run or store.delete_idle(blob.digest, cutoff):
            report.blobs_deleted += 1
            report.bytes_deleted += blob.size
    if not dry_run:
        report.temp_deleted = store.delete_stale_temp(now - timedelta(seconds=retention.temp_s))
    return report


def _redis_for(settings: Settings) -> Any:
    url = settings.backend()
    if url is None or not url.startswith(("redis://", "rediss://", "sentinel://")):
        return None
    from mediafleet.fleet.redis_client import redis_client

    # The fleet's one client factory: the password, and the TLS options for rediss:// (a private CA).
    return redis_client(settings, retry_s=3)


def gc(settings: Settings, *, manifest: Manifest | None = None, now: datetime | None = None,
       dry_run: bool = False, max_age_s: int | None = None) -> GcReport:
    """Sweep the blob store and result backend the settings name; see the module's rule.

    ``max_age_s`` replaces rule 1's window (``mediafleet gc --max-age``); rule 2 still holds.
    """
    manifest = manifest or settings.manifest()
    retention = Retention.from_settings(settings, manifest)
    if max_age_s is not None:
        retention = replace(retention, blob_s=max_age_s)
    client = _redis_for(settings)
    try:
        return collect_garbage(open_store(settings), retention,
                               now=now or datetime.now(UTC), redis=client, dry_run=dry_run)
    finally:
        if client is not None:
            client.close()
