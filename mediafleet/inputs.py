"""What ``mediafleet extract`` is given, opened and checked before any work: a file, ``-`` (standard
input) or an ``http(s)://`` URL, its type from its bytes, and the options against the manifest.

Mistakes raise :class:`UsageError` (the CLI exits 2 with its one-line message); an input that
cannot be had (a missing file, a failed download) raises :class:`InputUnavailable` (exit 1).
Messages name what the user typed (a file's name, a URL's host), never a full path or a URL's
credentials.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, BinaryIO
from urllib.parse import urlsplit

from mediafleet.contract.errors import MediafleetError
from mediafleet.contract.manifest import Capability, Manifest, OptionRule
from mediafleet.sniff import sniff

__all__ = ["Input", "InputUnavailable", "UsageError", "check_input", "describe_rule", "open_input"]

_HEAD = 4096
_SPOOL_IN_MEMORY = 64 * 1024 * 1024
_CHUNK = 1 << 20
# Types people try that no capability reads, by the name they know them by.
_NOT_SUPPORTED = {"image/gif": "GIF"}
_RAW_PCM_SUFFIXES = (".pcm", ".raw", ".s16le", ".s16be", ".s24le", ".s32le", ".f32le", ".f64le", ".u8", ".sln")


class UsageError(Exception):
    """A mistake in the command: one line, exit code 2."""


class InputUnavailable(Exception):
    """An input that cannot be had (missing file, failed download): one line, exit code 1."""


@dataclass
class Input:
    """An opened input: what to call it, and the file or spooled stream to submit."""

    name: str
    source: Path | BinaryIO
    head: bytes
    suffix: str

    def close(self) -> None:
        if not isinstance(self.source, Path):
            self.source.close()


def _largest(manifest: Manifest) -> int:
    return max((c.limits.max_bytes for c in manifest.capabilities.values()), default=0)


def _mib(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.0f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _spool(read: Any, limit: int, name: str) -> tuple[IO[bytes], bytes]:
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 - the Input closes it
    size, head = 0, b""
    try:
        for chunk in read():
            size += len(chunk)
            if size > limit:
                raise InputUnavailable(f"{name}: larger than the {_mib(limit)} the manifest in force accepts")
            if len(head) < _HEAD:
                head += chunk[: _HEAD - len(head)]
            spool.write(chunk)
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool, head


def _stdin(manifest: Manifest, stdin: BinaryIO) -> Input:
    if stdin.isatty():
        raise UsageError("- reads the artifact from standard input, which is a terminal: pipe a file in "
                         "(mediafleet extract - < report.pdf)")

    def read() -> Any:
        while chunk := stdin.read(_CHUNK):
            yield chunk

    spool, head = _spool(read, _largest(manifest), "stdin")
    return Input("stdin", spool, head, "")  # type: ignore[arg-type]


def _download(url: str, manifest: Manifest, timeout: float) -> Input:
    import httpx

    parts = urlsplit(url)
    host = parts.hostname or "the server"
    name = Path(parts.path).name or host
    limit = _largest(manifest)

    try:
        with httpx.Client(follow_redirects=True, max_redirects=5,
                          timeout=httpx.Timeout(timeout, connect=min(timeout, 15.0))) as client:
            with client.stream("GET", url) as response:
                if response.status_code != 200:
                    raise InputUnavailable(f"{name}: {host} answered HTTP {response.status_code}")
                declared = response.headers.get("content-length", "")
                if declared.isdigit() and int(declared) > limit:
                    raise InputUnavailable(f"{name}: larger than the {_mib(limit)} the manifest in force accepts")
                spool, head = _spool(lambda: response.iter_bytes(_CHUNK), limit, name)
    except httpx.TimeoutException:
        raise InputUnavailable(f"{name}: the download from {host} timed out") from None
    except httpx.HTTPError:
        raise InputUnavailable(f"{name}: cannot download from {host} (no connection, or a broken response)") from None
    return Input(name, spool, head, Path(name).suffix.lower())  # type: ignore[arg-type]


def open_input(spec: str, manifest: Manifest, *, stdin: BinaryIO, download_timeout: float = 300.0) -> Input:
    """Open one command-line input: ``-``, an ``http(s)://`` URL (downloaded, never more than the
    largest artifact the manifest accepts), or a file.

    Raises:
        UsageError: a directory, another URL scheme, ``-`` on a terminal.
        InputUnavailable: no such file, or the download failed or was too large.
    """
    if spec == "-":
        return _stdin(manifest, stdin)
    scheme = urlsplit(spec).scheme.lower()
    if "://" in spec and scheme not in ("http", "https"):
        raise UsageError(f"{scheme}:// inputs are not supported: give a file, - (standard input) or an http(s):// URL")
    if scheme in ("http", "https"):
        return _download(spec, manifest, download_timeout)
    path = Path(spec)
    if path.is_dir():
        raise UsageError(f"{path.name or spec} is a directory: name the files in it (e.g. {path.name or 'DIR'}/*.pdf)")
    if not path.is_file():
        raise InputUnavailable(f"{path.name}: no such file")
    try:
        with open(path, "rb") as fh:
            head = fh.read(_HEAD)
    except PermissionError:
        raise InputUnavailable(f"{path.name}: cannot be read (permission denied)") from None
    return Input(path.name, path, head, path.suffix.lower())


def _value(value: object) -> str:
    if isinstance(value, bool):
        return f"the boolean {json.dumps(value)}"
    if isinstance(value, (int, float)):
        return f"the number {value:g}"
    if isinstance(value, str):
        return f"the text {value!r}"
    return f"a JSON {type(value).__name__.replace('dict', 'object').replace('list', 'array')}"


def describe_rule(rule: OptionRule) -> str:
    """What an option accepts, in words: ``one of auto, never, always``, ``a number from 72 to 600``."""
    if rule.choices is not None:
        if all(isinstance(c, bool) for c in rule.choices):
            return "true or false" if len(rule.choices) > 1 else json.dumps(rule.choices[0])
        return "one of " + ", ".join(json.dumps(c) if not isinstance(c, str) else c for c in rule.choices)
    if rule.min is not None and rule.max is not None:
        return f"a number from {rule.min:g} to {rule.max:g}"
    if rule.min is not None:
        return f"a number of at least {rule.min:g}"
    if rule.max is not None:
        return f"a number of at most {rule.max:g}"
    return "any value"


def _check_options(capability: Capability, options: Mapping[str, Any]) -> None:
    for name, value in options.items():
        rule = capability.options.get(name)
        if rule is None:
            known = ", ".join(sorted(capability.options)) or "none"
            raise UsageError(f"-o {name}: {capability.action} has no option {name!r} (its options: {known})")
        # bool is an int in Python: 1 would pass as true; a boolean option takes true or false only.
        boolean = rule.choices is not None and all(isinstance(c, bool) for c in rule.choices)
        if not rule.allows(value) or (boolean and not isinstance(value, bool)):
            raise UsageError(f"-o {name}: {capability.action}'s {name} takes {describe_rule(rule)}, not {_value(value)}")


def check_input(item: Input, manifest: Manifest, action: str | None, options: Mapping[str, Any]) -> Capability | None:
    """The capability that will read ``item``, with ``options`` checked against it.

    Returns None when the dispatcher is better placed to say why it refuses the input (an empty
    file, a type the manifest in force does not accept): it then gives a failed bundle.

    Raises:
        UsageError: a type no capability reads (GIF, raw PCM, unrecognised bytes), or an option the
            capability does not declare or a value outside what it allows.
    """
    media_type = sniff(item.head)
    if not item.head:
        return None
    if media_type in _NOT_SUPPORTED:
        raise UsageError(f"{item.name}: {_NOT_SUPPORTED[media_type]} ({media_type}) is not supported; "
                         "convert it to PNG (or, if animated, to MP4)")
    if media_type is None:
        if item.suffix in _RAW_PCM_SUFFIXES:
            raise UsageError(f"{item.name}: raw PCM (no header, so no rate or channels) is not supported; wrap it "
                             "in WAV, e.g. ffmpeg -f s16le -ar 16000 -ac 1 -i in.pcm out.wav")
        accepted = sorted({t for c in manifest.capabilities.values() for t in c.media_types})
        raise UsageError(f"{item.name}: the type is not recognised from its bytes; supported: {', '.join(accepted)}")
    try:
        capability = manifest.for_media_type(media_type, action)
    except MediafleetError:
        return None
    _check_options(capability, options)
    return capability
