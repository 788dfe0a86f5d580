"""``mediafleet serve-mcp``: the four sidecar tools today's callers already call, in front of the fleet.

The callers (CONTRACT.md section 5) make one MCP tool call per artifact, with arguments
``{"action": <action>, "params_json": <a JSON object, as a string>}``:

============================  ======================  ==========================================
tool                          action                  capability of the manifest in force
============================  ======================  ==========================================
``pdf_action``                ``ocr_pdf``             PDF text layer: pages and line boxes
``image_decode``              ``analyze_image``       image: pHash, thumbnail, text regions
``transcribe_media``          ``transcribe_segments`` audio: timed segments
``video_keyframes``           ``extract_keyframes``   video: shots and keyframes
============================  ======================  ==========================================

Params: ``digest`` (the callers' engine blob digest, or ``sha256:<hex>`` of the bytes: see
:mod:`mediafleet.mcp.caller_digest`), ``media_type`` (a hint within a modality), and either
``artifact_b64`` (the bytes, standard base64) or ``blob_ref`` (``blob:<hex>``: an artifact the
fleet's blob store already holds, for one too big to pass inline), plus the capability's declared
options by name. Anything else is refused. The checks, in order, all before any work: the tool
and action are known; the capability is declared; ``params_json`` is one JSON object with no
unknown or repeated keys; the size implied by the base64 length is within the capability's and
this server's inline limit (before decoding); the digest; then the dispatcher's checks (the
type the bytes show, a claimed type of another modality refused; the options).

A response is one JSON object, sent once as the tool result's text: the callers' shape (see
:mod:`mediafleet.adapters.caller`) first, the full evidence bundle last (``bundle``), with the caller's
claims recorded on it (:func:`mediafleet.adapters.bundle.with_claims`). A refusal or failure is the callers'
own channel, ``available: false`` with ``error`` (``"<code>: <public message>"``): no paths, no
library text, no stack trace; the bundle of a failed job records a ``failed`` activity and no
claim, so nothing reports it as ``ok``. A call waits ``wait_s`` for its job, which goes on past
it: a retried call attaches (on the fleet by job id; in-process through
:mod:`mediafleet.mcp.localjobs`).
"""

from __future__ import annotations

import base64
import io
import json
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from mediafleet.adapters.bundle import with_claims
from mediafleet.adapters.caller import caller_response, failure_response, inline_wanted
from mediafleet.contract.bundle import CallerClaims, EvidenceBundle
from mediafleet.contract.digests import digest_of_ref
from mediafleet.contract.errors import (
    CapabilityRefused,
    ErrorCode,
    FleetUnreachable,
    LimitExceeded,
    MediafleetError,
    PublicError,
    TimedOut,
    to_public,
)
from mediafleet.contract.manifest import Capability
from mediafleet.dispatch import Dispatcher, Job
from mediafleet.mcp import caller_digest
from mediafleet.mcp.extras import crop_key, crop_targets, embedding_key, page_embeddings, page_texts
from mediafleet.mcp.inline import Decoded, NotBase64, b64_size, decode_into, split_params
from mediafleet.mcp.localjobs import LocalJobs, RunnerDied, run_folder, submit_request
from mediafleet.sniff import sniff
from mediafleet.modalities.registry import SPECS

__all__ = ["DEFAULT_MAX_IMAGE_BYTES", "DEFAULT_MAX_INLINE_BYTES", "DEFAULT_REGION_CROPS", "DEFAULT_WAIT_S", "TOOLS",
           "SidecarTools", "too_large_message"]

log = logging.getLogger("mediafleet.mcp")


def _tools() -> dict[str, str]:
    """The callers' tool -> the one action it serves: each registered spec's capability's ``tool``
    in the shipped manifest (the one in force may disable some; a call to one then answers
    ``available: false``)."""
    tools: dict[str, str] = {}
    for spec in SPECS:
        tool = spec.capability.tool
        if tool in tools:
            raise ValueError(f"{tools[tool]} and {spec.action} are both the {tool} tool; a tool serves one action")
        tools[tool] = spec.action
    return tools


TOOLS: dict[str, str] = _tools()

DEFAULT_MAX_INLINE_BYTES = 1024 * 1024 * 1024  # an hour of CD-quality WAV, a 512 MiB PDF, a video of hundreds of MB
DEFAULT_MAX_IMAGE_BYTES = 64 * 1024 * 1024
DEFAULT_REGION_CROPS = 64
# The callers give up after 60 s unless their mcp_config.json sets "timeout": answer "still running,
# call again" before that, rather than be cut off (the job goes on either way).
DEFAULT_WAIT_S = 50.0
_ARTIFACT_PARAMS = frozenset({"digest", "media_type", "artifact_b64", "blob_ref"})
_ARGUMENTS = frozenset({"action", "params_json"})
_MEDIA_TYPE = re.compile(r"[A-Za-z0-9][\w!#$&^.+-]{0,126}/[A-Za-z0-9][\w!#$&^.+-]{0,126}(?:\s*;[ -~]{0,128})?",
                         re.ASCII)
_SAFE_NAME = re.compile(r"[A-Za-z0-9_.-]{1,64}")
_PNG = b"\x89PNG\r\n\x1a\n"


def _refuse(message: str) -> CapabilityRefused:
    return CapabilityRefused(message, code=ErrorCode.INVALID_REQUEST)


def _shown(name: object) -> str:
    """A caller-supplied name, echoed only when it is short and plain."""
    return repr(name) if isinstance(name, str) and _SAFE_NAME.fullmatch(name) else "(a name not shown)"


class _Failed(Exception):
    """A job that ran (or was refused by the dispatcher) and failed: its public error and bundle."""

    def __init__(self, error: PublicError, bundle: EvidenceBundle | None) -> None:
        super().__init__(error.message)
        self.error = error
        self.bundle = bundle


@dataclass(frozen=True)
class _Request:
    digest: str  # sha256:<hex> of the bytes
    media_type: str
    inline: Decoded | None  # the decoded artifact_b64; None: the artifact is the stored blob named by digest
    options: dict[str, Any]
    claims: CallerClaims


def _no_repeats(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise _refuse(f"params_json repeats the key {_shown(key)}")
        out[key] = value
    return out


def _not_json(constant: str) -> Any:
    raise ValueError("NaN and Infinity are not JSON")


def _parsed(text: str) -> dict[str, Any]:
    try:
        params = json.loads(text, object_pairs_hook=_no_repeats, parse_constant=_not_json)
    except (ValueError, RecursionError):  # JSONDecodeError is a ValueError; deep nesting recurses
        raise _refuse("params_json is not valid JSON") from None
    if not isinstance(params, dict):
        raise _refuse("params_json must be a JSON object")
    return params


@dataclass(frozen=True)
class _Params:
    """``params_json`` parsed, and where its ``artifact_b64`` text is: ``(text, (start, end))``, the
    value taken in place from ``params_json`` (never copied whole), or None when there is none."""

    values: dict[str, Any]
    artifact: tuple[str, tuple[int, int]] | None


def _params(params_json: str) -> _Params:
    rest, span = split_params(params_json)
    if span is not None:
        values = _parsed(rest)
        if values.get("artifact_b64") == "":  # the emptied value is the top-level one
            return _Params(values, (params_json, span))
        values = _parsed(params_json)
    else:
        values = _parsed(params_json)
    encoded = values.get("artifact_b64")
    return _Params(values, (encoded, (0, len(encoded))) if isinstance(encoded, str) else None)


class SidecarTools:
    """The four tools over one dispatcher, as plain synchronous calls (the MCP layer is thin).

    Args:
        dispatcher: built once from the settings (in-process without a broker, the fleet with one).
        max_inline_bytes: the most bytes of artifact one call carries in ``artifact_b64``.
        max_image_bytes: the most bytes of base64 images one response carries (thumbnail, region
            crops, keyframes; default the smaller of ``max_inline_bytes`` and 64 MiB).
        region_crops: at most this many regions of an image get ``crop_png_b64`` (0: none).
        embeddings: give each PDF page the static text embedding of its text (when the
            ``wordllama`` wheel is installed; see :mod:`mediafleet.mcp.extras`).
        wait_s: how long a call waits for its job (default 50 s, under the callers' 60 s). A call
            that waits longer answers ``timeout`` with ``retryable: true`` and the job goes on:
            calling again with the same artifact and options attaches to it, or gets its result.
        detached: without a broker, run each job in its own process (a stdio server, which the
            caller kills after each call); False: in a thread of this process (an HTTP server).
        jobs_root: where in-process job folders live (default: beside the blob store).
        served: the tools this server answers (default all four): under a catalog server's name,
            only the ones the callers send there.
    """

    def __init__(self, dispatcher: Dispatcher, *, max_inline_bytes: int = DEFAULT_MAX_INLINE_BYTES,
                 max_image_bytes: int | None = None, region_crops: int = DEFAULT_REGION_CROPS,
                 embeddings: bool = True, wait_s: float | None = None, detached: bool = True,
                 jobs_root: Any = None, served: Iterable[str] | None = None) -> None:
        if max_inline_bytes <= 0 or (max_image_bytes is not None and max_image_bytes < 0) or region_crops < 0:
            raise ValueError("max_inline_bytes must be > 0, max_image_bytes and region_crops >= 0")
        names = list(TOOLS) if served is None else list(served)
        unknown = [name for name in names if name not in TOOLS]
        if unknown or not names:
            raise ValueError(f"the tools served are some of {', '.join(TOOLS)}")
        self.served = {name: TOOLS[name] for name in names}
        self.dispatcher = dispatcher
        self.max_inline_bytes = max_inline_bytes
        self.max_image_bytes = (min(max_inline_bytes, DEFAULT_MAX_IMAGE_BYTES) if max_image_bytes is None
                                else max_image_bytes)
        self.region_crops, self.embeddings = region_crops, embeddings
        self.wait_s = DEFAULT_WAIT_S if wait_s is None else wait_s
        self._owners = dispatcher.settings.engine_owner_scopes()
        self._local: LocalJobs | None = None
        if dispatcher.in_process:
            from pathlib import Path

            root = Path(jobs_root) if jobs_root is not None else dispatcher.settings.blob_root.parent / "jobs"
            self._local = LocalJobs(
                root, detached=detached, ttl_s=dispatcher.settings.result_ttl_s,
                runner=None if detached else (lambda folder: run_folder(
                    folder, lambda request: submit_request(dispatcher, request))))

    # -- what the tools say about themselves ------------------------------------------------

    def describe(self) -> list[dict[str, Any]]:
        """Each tool's name, description and input schema (``additionalProperties: false``)."""
        out = []
        for tool, action in self.served.items():
            capability = self.dispatcher.manifest.capabilities.get(action)
            if capability is None:
                state = "Not declared by the manifest in force: every call answers available: false."
            else:
                options = ", ".join(sorted(capability.options)) or "none"
                state = f"Accepts {', '.join(capability.media_types)}; options: {options}."
            out.append({
                "name": tool,
                "description": f"mediafleet {action}: the callers' {tool} sidecar tool. {state} "
                               "params_json: a JSON object with digest, media_type, and artifact_b64 "
                               "or blob_ref, plus declared options.",
                "input_schema": {
                    "type": "object",
                    "properties": {
                        "action": {"type": "string", "enum": [action]},
                        "params_json": {"type": "string", "description": "a JSON object, as a string"},
                    },
                    "required": ["action", "params_json"],
                    "additionalProperties": False,
                },
            })
        return out

    # -- one call -------------------------------------------------------------------------------

    def call(self, tool: str, arguments: Mapping[str, Any] | None) -> tuple[dict[str, Any], bool]:
        """Answer one tool call: ``(response object, is_error)``. Never raises."""
        started = time.monotonic()
        bundle: EvidenceBundle | None = None
        try:
            response = self._call(tool, arguments or {})
            bundle_data = response["bundle"]
            log.info("%s: ok, job %s, %d loci, %.0f ms", tool, bundle_data["job_id"],
                     sum(n["node_type"] == "Evidence" for n in bundle_data["nodes"]),
                     (time.monotonic() - started) * 1000)
            return response, False
        except _Failed as failed:
            error, bundle = failed.error, failed.bundle
        except MediafleetError as exc:  # the fleet unreachable included: retryable engine_unavailable
            if isinstance(exc, FleetUnreachable):
                log.warning("%s: the fleet cannot be reached", tool)
            error = exc.public()
        except Exception as exc:  # noqa: BLE001 - the boundary: every failure becomes a public error
            log.exception("%s: unexpected failure", tool)
            error = to_public(exc)
        log.info("%s: refused or failed: %s, %.0f ms", tool, error.code.value, (time.monotonic() - started) * 1000)
        return failure_response(error, bundle), True

    def _call(self, tool: str, arguments: Mapping[str, Any]) -> dict[str, Any]:
        action = self.served.get(tool)
        if action is None:
            raise CapabilityRefused(f"there is no tool named {_shown(tool)} here")
        extra = set(arguments) - _ARGUMENTS
        if extra:
            raise _refuse(f"unknown arguments: {', '.join(sorted(_shown(k) for k in extra))}; "
                          "a call takes exactly action and params_json")
        if not isinstance(arguments.get("action"), str) or not isinstance(arguments.get("params_json"), str):
            raise _refuse("a call takes action and params_json, both strings")
        if arguments["action"] != action:
            raise _refuse(f"{tool} has no action {_shown(arguments['action'])}; its action is {action!r}")
        capability = self.dispatcher.manifest.capabilities.get(action)
        if capability is None:
            raise CapabilityRefused(f"{action} is not declared by the manifest in force")
        request = self._request(_params(arguments["params_json"]), capability)  # the artifact decoded into a file
        bundle = self._run(request, capability)
        if bundle.status != "ok":
            assert bundle.error is not None
            raise _Failed(bundle.error, bundle)
        inline = self._inline(bundle, capability)
        model = None
        if self.embeddings and (found := page_embeddings(page_texts(bundle))) is not None:
            vectors, model = found
            inline.update({embedding_key(page): vector for page, vector in vectors.items()})
        return caller_response(bundle, inline, embedding_model=model or None)

    def _request(self, parsed: _Params, capability: Capability) -> _Request:
        params = parsed.values
        unknown = set(params) - _ARTIFACT_PARAMS - set(capability.options)
        if unknown:
            raise _refuse(f"unknown params for {capability.action}: {', '.join(sorted(_shown(k) for k in unknown))}")
        media_type = params.get("media_type")
        if not isinstance(media_type, str) or not _MEDIA_TYPE.fullmatch(media_type):
            raise _refuse("media_type must be a media type such as application/pdf")
        options = {k: v for k, v in params.items() if k not in _ARTIFACT_PARAMS}
        if ("artifact_b64" in params) == ("blob_ref" in params):
            raise _refuse("give exactly one of artifact_b64 (the bytes) and blob_ref (a blob the fleet holds)")
        if "blob_ref" in params:
            ref = params["blob_ref"]
            digest = digest_of_ref(ref) if isinstance(ref, str) else None
            if digest is None:
                raise _refuse("blob_ref must be 'blob:' and 64 lowercase hex characters")
            given = params.get("digest")
            if not isinstance(given, str) or "sha256:" + given.lower().removeprefix("sha256:") != digest:
                raise _refuse("blob_ref and digest name different artifacts")
            claims = CallerClaims(digest=given.lower(), digest_form="sha256", digest_check="sha256_of_bytes")
            return _Request(digest, media_type, None, options, claims)
        if not isinstance(params.get("digest"), str):
            raise _refuse("digest must be 64 hex characters: the engine blob digest, or 'sha256:' and the SHA-256 "
                          "of the bytes")
        if parsed.artifact is None:
            raise _refuse("artifact_b64 must be a string")
        text, span = parsed.artifact
        try:
            size = b64_size(text, span)
        except NotBase64:
            raise _refuse("artifact_b64 is not valid base64 (standard alphabet, padded)") from None
        capability.check_size(size)
        if size > self.max_inline_bytes:
            raise LimitExceeded(too_large_message(self.max_inline_bytes))
        try:
            decoded = decode_into(text, span, directory=self._spool_dir())
        except NotBase64:
            raise _refuse("artifact_b64 is not valid base64 (standard alphabet, padded)") from None
        try:
            claims = caller_digest.check(params.get("digest"), decoded.chunks, decoded.sha256_hex, self._owners)
        except BaseException:
            decoded.file.close()
            raise
        return _Request("sha256:" + decoded.sha256_hex, media_type, decoded, options, claims)

    def _spool_dir(self) -> Any:
        """Where an inline artifact is decoded: the blob store's folder when it is local, else the
        system's temporary folder."""
        root = self.dispatcher.settings.blob_root
        return root if root.is_dir() else None

    def _run(self, request: _Request, capability: Capability) -> EvidenceBundle:
        kwargs: dict[str, Any] = {"action": capability.action, "media_type": request.media_type,
                                  "options": request.options, "claims": request.claims}
        if self._local is not None:
            return self._run_local(request, capability)
        job: Job
        if request.inline is None:
            job = self.dispatcher.submit_stored(request.digest, **kwargs)
        else:
            with request.inline.file as artifact:
                job = self.dispatcher.submit(artifact, **kwargs)
        try:
            return job.bundle(timeout=self.wait_s)
        except TimedOut:
            raise _Failed(_still_running(job.id), None) from None

    def _run_local(self, request: _Request, capability: Capability) -> EvidenceBundle:
        """In-process: the job runs in its own job folder, so it outlives this call (see
        :mod:`mediafleet.mcp.localjobs`); the dispatcher's checks run first, here, so a refusal costs
        no job."""
        assert self._local is not None
        store = self.dispatcher.store
        if request.inline is not None:
            with request.inline.file as artifact:
                digest, size, head = store.put_stream(artifact)
        else:
            digest = request.digest
            try:
                with store.verified_path(digest) as path, open(path, "rb") as fh:
                    size, head = path.stat().st_size, fh.read(4096)
            except MediafleetError:  # not held, or damaged: the dispatcher's own refusal, with its bundle
                return self.dispatcher.submit_stored(digest, action=capability.action, media_type=request.media_type,
                                                     options=request.options, claims=request.claims).bundle()
        refused = self.dispatcher.precheck(head, size, digest, action=capability.action,
                                           media_type=request.media_type, options=request.options,
                                           claims=request.claims)
        if refused is not None:
            return refused
        job_id = self.dispatcher.job_id_for(digest, capability, request.options)
        try:
            bundle = self._local.run(job_id, {"digest": digest, "action": capability.action,
                                              "options": request.options}, self.wait_s)
        except TimedOut:
            raise _Failed(_still_running(job_id), None) from None
        except RunnerDied as exc:  # told once; the next call runs the job again
            raise _Failed(exc.public(), None) from None
        return with_claims(bundle, self.dispatcher.claims_for(request.claims, request.media_type, sniff(head)))

    # -- images inline -------------------------------------------------------------------------

    def _inline(self, bundle: EvidenceBundle, capability: Capability) -> dict[str, Any]:
        """Base64 PNGs of the images the caller wants inline, read from the blob store now: the
        thumbnail and keyframes first, then region crops, within ``max_image_bytes`` in all."""
        budget = self.max_image_bytes
        inline: dict[str, Any] = {}
        wanted = inline_wanted(bundle)
        for ref in wanted:
            png = self._png(ref)
            if png is None:
                continue
            encoded = base64.b64encode(png).decode("ascii")
            if len(encoded) > budget:
                log.info("inline budget spent: %d image(s) not inlined", len(wanted) - len(inline))
                return inline
            budget -= len(encoded)
            inline[ref] = encoded
        for key, png in self._crops(bundle, capability):
            encoded = base64.b64encode(png).decode("ascii")
            if len(encoded) > budget:
                log.info("inline budget spent: region crops cut short")
                break
            budget -= len(encoded)
            inline[key] = encoded
        return inline

    def _crops(self, bundle: EvidenceBundle, capability: Capability) -> list[tuple[str, bytes]]:
        """(inline key, PNG) of the first ``region_crops`` text-line regions of an image, cut from
        the stored artifact (its digest checked); none when it cannot be read back."""
        targets = crop_targets(bundle)[:self.region_crops]
        if not targets:
            return []
        from mediafleet.workers.image.crops import region_crops

        try:
            with self.dispatcher.store.verified_path(bundle.artifact.digest) as path:
                pngs = region_crops(path, [box for _, box in targets], capability.limits, max_count=len(targets))
        except MediafleetError as exc:  # gone from the store, or changed: the boxes still locate them
            log.warning("region crops not made: %s", exc.code.value)
            return []
        return [(crop_key(evidence_id), png) for (evidence_id, _), png in zip(targets, pngs, strict=True)
                if png is not None]

    def _png(self, blob_ref: str) -> bytes | None:
        digest = digest_of_ref(blob_ref)
        if digest is None:
            return None
        try:
            with self.dispatcher.store.verified_path(digest) as path:
                data = path.read_bytes()
        except MediafleetError as exc:
            log.warning("image %s not inlined: %s", blob_ref[:17], exc.code.value)
            return None
        if data.startswith(_PNG):
            return data
        return _to_png(data)


def too_large_message(max_inline_bytes: int) -> str:
    """What a caller is told of an artifact over the inline limit: the limit, and what to do."""
    return (f"the artifact is larger than this server's {max_inline_bytes}-byte inline limit; put it in the "
            "fleet's blob store and pass blob_ref, or have the operator raise serve-mcp's --max-inline-bytes")


def _still_running(job_id: str) -> PublicError:
    return PublicError(code=ErrorCode.TIMEOUT, retryable=True,
                       message=f"job {job_id} is still running; calling again with the same artifact and options "
                               "attaches to it and gets its result")


def _to_png(data: bytes) -> bytes | None:
    """A stored JPEG re-encoded as PNG (the callers' key is ``png_b64``); None when Pillow is absent."""
    try:
        from PIL import Image
    except ImportError:
        log.warning("Pillow is not installed: JPEG images are not inlined as PNG")
        return None
    try:
        with Image.open(io.BytesIO(data)) as image:
            out = io.BytesIO()
            image.save(out, format="PNG")
    except Exception:  # noqa: BLE001 - a damaged image is left out, never a failed call
        log.warning("a stored image could not be re-encoded as PNG")
        return None
    return out.getvalue()


# -- the MCP layer ------------------------------------------------------------------------------
