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
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from importlib import resources
from typing import IO, Any, BinaryIO
from urllib.parse import urlsplit

from mediafleet.contract.digests import read_chunks
from mediafleet.contract.errors import MediafleetError
from mediafleet.contract.manifest import Capability, Manifest, OptionRule
from mediafleet.sniff import sniff

__all__ = ["Input", "InputUnavailable", "UnsupportedType", "UsageError", "bundled_samples", "check_input", "describe_rule",
           "open_input", "supported_types"]

_HEAD = 4096
_SPOOL_IN_MEMORY = 64 * 1024 * 1024
_MAX_REDIRECTS = 5
# Types people try that no capability reads, by the name they know them by.
_NOT_SUPPORTED = {"image/gif": "GIF"}
_RAW_PCM_SUFFIXES = (".pcm", ".raw", ".s16le", ".s16be", ".s24le", ".s32le", ".f32le", ".f64le", ".u8", ".sln")


class UsageError(Exception):
    """A mistake in the command: one line, exit code 2."""


class UnsupportedType(UsageError):
    """An input of a type no capability reads. Without ``--json`` a mistake (exit 2, nothing run);
    with it, that input's line is a failed bundle (``unsupported_media_type``) and the others run.

    Args:
        name: the input as the user named it.
        detail: what is wrong and what to do, without the name.
        supported: the media types the manifest in force reads.
    """

    def __init__(self, name: str, detail: str, supported: list[str]) -> None:
        super().__init__(f"{name}: {detail}")
        self.name, self.detail, self.supported = name, detail, supported

    def public(self) -> str:
        """The bundle's message: what is wrong, and every type that is read (naming no file)."""
        listed = "" if "supported:" in self.detail else f"; supported: {', '.join(self.supported)}"
        return self.detail + listed


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


def _largest(manifest: Manifest, media_type: str | None = None) -> int:
    """The most bytes any capability accepts (of ``media_type``, when one accepts it)."""
    limits = [c.limits.max_bytes for c in manifest.capabilities.values()]
    if media_type is not None:
        limits = [c.limits.max_bytes for c in manifest.capabilities.values() if media_type in c.media_types] or limits
    return max(limits, default=0)


def _mib(n: int) -> str:
    if n >= 2**30:
        return f"{n / 2**30:.0f} GiB"
    return f"{n / 2**20:.0f} MiB" if n >= 2**20 else f"{n:,} bytes"


def _too_large(name: str, limit: int) -> InputUnavailable:
    return InputUnavailable(f"{name}: larger than the {_mib(limit)} the manifest in force accepts")


def _spool(chunks: Iterable[bytes], manifest: Manifest, name: str, *, declared: int | None = None,
           deadline: float | None = None) -> tuple[IO[bytes], bytes]:
    """Copy ``chunks`` into a temporary file (in memory up to 64 MiB), never past the manifest's limit.

    The limit is the largest any capability accepts until the first 4 KiB are in; from then on, the
    largest for the type those bytes have (a PDF stops at the PDF limit, not the video one), and a
    ``declared`` length (a server's Content-Length) over it is refused before the rest is read.
    """
    spool: IO[bytes] = tempfile.SpooledTemporaryFile(max_size=_SPOOL_IN_MEMORY)  # noqa: SIM115 - the Input closes it
    size, head, limit, typed = 0, b"", _largest(manifest), False

    def check() -> None:
        if size > limit or (typed and declared is not None and declared > limit):
            raise _too_large(name, limit)

    try:
        for chunk in chunks:
            if not typed:
                head += chunk[: _HEAD - len(head)]
                if len(head) == _HEAD:
                    limit, typed = _largest(manifest, sniff(head)), True
            size += len(chunk)
            check()
            if deadline is not None and time.monotonic() > deadline:
                raise InputUnavailable(f"{name}: the download took longer than allowed")
            spool.write(chunk)
        if not typed:
            limit, typed = _largest(manifest, sniff(head)), True
            check()
    except BaseException:
        spool.close()
        raise
    spool.seek(0)
    return spool, head


def _stdin(manifest: Manifest, stdin: BinaryIO) -> Input:
    if stdin.isatty():
        raise UsageError("- reads the artifact from standard input, which is a terminal: pipe a file in "
                         "(mediafleet extract - < report.pdf)")
    spool, head = _spool(read_chunks(stdin), manifest, "stdin")
    return Input("stdin", spool, head, "")  # type: ignore[arg-type]


def _download(url: str, manifest: Manifest, timeout: float) -> Input:
    """GET ``url`` into a temporary file: at most the manifest's limit, within ``timeout`` seconds in
    all, following up to 5 redirects and only to http(s) URLs.

    Raises:
        InputUnavailable: the server is unreachable or slow, answers other than 200, redirects
            elsewhere than http(s) (``file://``, ``ftp://``...) or too often, or sends too much.
            The message names the file and the host, never the URL's path, query or credentials.
    """
    import httpx

    parts = urlsplit(url)
    host = parts.hostname or "the server"
    name = Path(parts.path).name or host
    deadline = time.monotonic() + timeout
    target = httpx.URL(url)
    try:
        limits = httpx.Timeout(timeout, connect=min(timeout, 15.0))
        with httpx.Client(follow_redirects=False, timeout=limits) as client:
            for _ in range(_MAX_REDIRECTS + 1):
                with client.stream("GET", target) as response:
                    if response.is_redirect:
                        target = target.join(response.headers["location"])
                        if target.scheme not in ("http", "https"):
                            raise InputUnavailable(f"{name}: {host} redirected to a {target.scheme}:// URL; "
                                                   "only http:// and https:// redirects are followed")
                        continue
                    if response.status_code != 200:
                        raise InputUnavailable(f"{name}: {host} answered HTTP {response.status_code}")
                    length = response.headers.get("content-length", "")
                    declared = int(length) if length.isdigit() else None
                    if declared is not None and declared > (limit := _largest(manifest)):
                        raise _too_large(name, limit)
                    spool, head = _spool(response.iter_bytes(), manifest, name, declared=declared,
                                         deadline=deadline)
                    break
            else:
                raise InputUnavailable(f"{name}: {host} redirected more than {_MAX_REDIRECTS} times")
    except httpx.TimeoutException:
        raise InputUnavailable(f"{name}: the download from {host} timed out") from None
    except (httpx.HTTPError, httpx.InvalidURL):
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


def supported_types(manifest: Manifest) -> list[str]:
    """Every media type some capability of the manifest in force reads, sorted."""
    return sorted({t for c in manifest.capabilities.values() for t in c.media_types})


def check_input(item: Input, manifest: Manifest, action: str | None, options: Mapping[str, Any]) -> Capability | None:
    """The capability that will read ``item``, with ``options`` checked against it.

    Returns None when the dispatcher is better placed to say why it refuses the input (an empty
    file, a type the manifest in force does not accept): it then gives a failed bundle.

    Raises:
        UnsupportedType: a type no capability reads (GIF, raw PCM, unrecognised bytes).
        UsageError: an option the capability does not declare or a value outside what it allows.
    """
    media_type = sniff(item.head)
    if not item.head:
        return None
    supported = supported_types(manifest)
    if media_type in _NOT_SUPPORTED:
        raise UnsupportedType(item.name, f"{_NOT_SUPPORTED[media_type]} ({media_type}) is not supported; "
                              "convert it to PNG (or, if animated, to MP4)", supported)
    if media_type is None:
        if item.suffix in _RAW_PCM_SUFFIXES:
            raise UnsupportedType(item.name, "raw PCM (no header, so no rate or channels) is not supported; wrap it "
                                  "in WAV, e.g. ffmpeg -f s16le -ar 16000 -ac 1 -i in.pcm out.wav", supported)
        raise UnsupportedType(item.name, f"the type is not recognised from its bytes; supported: {', '.join(supported)}",
                              supported)
    try:
        capability = manifest.for_media_type(media_type, action)
    except MediafleetError:
        return None
    _check_options(capability, options)
    return capability


def bundled_samples() -> list[Path]:
    """The sample media installed with the package (``mediafleet extract --samples``)."""
    folder = resources.files("mediafleet").joinpath("samples")
    return sorted(Path(str(p)) for p in folder.iterdir() if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".md"))
