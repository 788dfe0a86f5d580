"""Index a job's evidence as it finishes, when ``MEDIAFLEET_DISCOVERY_INDEX`` names an index.

The setting is the index URL with the host-fixed scope as its fragment:
``sqlite:/var/lib/mediafleet/discovery.db#workspace=harbour`` or
``postgresql://db.internal/evidence?sslmode=require#workspace=harbour&subject=north-quay``
(``subject`` defaults to ``default``). The fragment never reaches the database driver.

:func:`index_finished` is called where a job's final outcome is written: by the in-process
dispatcher, and on the fleet by the one reporter that finishes the caller's job (the last part
to report). Indexing the same bundle twice changes nothing (units are keyed by their locus ids),
and a failure to index is logged, never a failed job.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qsl

from mediafleet.discovery.index_open import open_index, parse_index_url
from mediafleet.discovery.units import Scope

if TYPE_CHECKING:
    from mediafleet.contract.manifest import Manifest

__all__ = ["index_finished", "parse_index_setting"]

log = logging.getLogger("mediafleet.discovery")


def parse_index_setting(value: str) -> tuple[str, Scope]:
    """``(index URL, scope)`` of a ``MEDIAFLEET_DISCOVERY_INDEX`` value.

    Raises:
        ValueError: not an index URL, or no ``#workspace=...`` fragment.
    """
    url, sep, fragment = value.partition("#")
    parse_index_url(url)
    fields = dict(parse_qsl(fragment, keep_blank_values=True, strict_parsing=bool(fragment)))
    if not sep or set(fields) - {"workspace", "subject"} or "workspace" not in fields:
        raise ValueError("the discovery index setting ends with #workspace=NAME (and optionally &subject=NAME)")
    return url, Scope(fields["workspace"], fields.get("subject", "default"))


def index_finished(setting: str | None, outcome: Any, manifest: Manifest) -> None:
    """Index the evidence of a finished job's outcome (an ``ok`` one; others hold none). A joined
    outcome written as it is read (a split PDF's) is made whole here: an index holds it all."""
    if setting is None or outcome.status != "ok":
        return
    from mediafleet.contract.jobs import Outcome

    if not isinstance(outcome, Outcome):
        outcome = outcome.outcome()
    from mediafleet.adapters.bundle import build_bundle

    try:
        url, scope = parse_index_setting(setting)
        capability = manifest.capabilities.get(outcome.action)
        if capability is None:
            return
        index = open_index(url)
        try:
            report = index.add_bundle(scope, build_bundle(outcome, capability))
        finally:
            index.close()
        log.info("job %s: %d discovery units indexed", outcome.job_id, report.added)
    except Exception as exc:  # noqa: BLE001 - indexing is a side effect; the job's outcome stands
        log.warning("job %s: not indexed for discovery: %s", outcome.job_id, type(exc).__name__)
