"""The digest a caller sends with an artifact: the SHA-256 of its bytes, or its engine's blob digest.

The callers (CONTRACT.md section 5) send ``digest = await client.blob.store(bytes)``: the
epistemic-graph engine's content address, which is not the SHA-256 of the bytes but the SHA-256 of
the MessagePack manifest of the chunked upload (engine 2.27.7, ``BlobManifest`` serialised with
named fields)::

    {"schema_version": 2, "owner_scope": <scope>, "chunks": [<sha256 hex of each chunk>],
     "chunk_lens": [<bytes of each chunk>], "len": <total bytes>, "chunk_size": <requested size>}

The callers' client uploads in 1 MiB chunks. ``owner_scope`` belongs to the caller's engine session
(its verified tenant and principal, or the engine's anonymous local scope), so the fleet can only
recompute the engine form for owner scopes the operator configures (``engine_owners``).

What :func:`check` decides, for a digest and the bytes that came with it:

* ``sha256:<hex>``: must be the bytes' SHA-256 (``sha256_of_bytes``), else refused;
* bare hex equal to the bytes' SHA-256: ``sha256_of_bytes``;
* any other bare hex is the engine form: with owner scopes configured it must match one of them
  (``engine_blob_manifest``), else refused; with none it cannot be compared and is kept as the
  caller's correlation id (``not_compared``), never reported as verified;
* anything else is refused as malformed.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from mediafleet.contract.bundle import CallerClaims
from mediafleet.contract.digests import DIGEST, HEX
from mediafleet.contract.errors import CapabilityRefused, ErrorCode, IntegrityError, Phase

__all__ = ["ANONYMOUS_LOCAL", "ENGINE_CHUNK_SIZE", "ChunkHashes", "check", "chunk_hashes", "engine_blob_digest",
           "owner_scope", "parse_owner"]

ENGINE_CHUNK_SIZE = 1 << 20  # the callers' client default (BlobClient.DEFAULT_CHUNK_SIZE)
_MANIFEST_VERSION = 2
_DIGEST = re.compile(rf"(sha256:)?((?i:{HEX.pattern}))")  # the hex in either case, as callers send it
_SCOPE = re.compile(rf"carrier-owner:{HEX.pattern}")
_OPAQUE_TENANT = re.compile(rf"carrier-tenant:{HEX.pattern}")
_OPAQUE_PRINCIPAL = re.compile(rf"principal:{DIGEST.pattern}")


def _opaque_key(namespace: str, scope: str, local: str) -> str:
    """The engine's opaque coordinator key: ``<namespace>:<sha256(namespace NUL scope NUL local)>``."""
    digest = hashlib.sha256(b"\0".join(part.encode("utf-8") for part in (namespace, scope, local))).hexdigest()
    return f"{namespace}:{digest}"


def owner_scope(tenant: str, principal: str) -> str:
    """The engine's blob owner scope for a verified tenant and principal (engine 2.27.7 rules).

    A tenant or principal already in the engine's opaque form is used as it is.
    """
    tenant, principal = tenant.strip(), principal.strip()
    if not tenant or not principal:
        raise ValueError("an engine owner needs a tenant and a principal")
    tenant_scope = tenant if _OPAQUE_TENANT.fullmatch(tenant) else _opaque_key("carrier-tenant", "verified", tenant)
    actor = principal if _OPAQUE_PRINCIPAL.fullmatch(principal) else (
        "principal:sha256:" + hashlib.sha256(principal.encode("utf-8")).hexdigest())
    return _opaque_key("carrier-owner", tenant_scope, actor)


#: The scope of an engine started with ``--auth-mode none`` (tenant ``local``, principal ``anonymous``).
ANONYMOUS_LOCAL = owner_scope("local", "anonymous")


def parse_owner(entry: str) -> str:
    """One configured engine owner: ``anonymous-local``, ``carrier-owner:<hex>`` or ``TENANT|PRINCIPAL``."""
    entry = entry.strip()
    if entry == "anonymous-local":
        return ANONYMOUS_LOCAL
    if _SCOPE.fullmatch(entry):
        return entry
    tenant, sep, principal = entry.partition("|")
    if not sep:
        raise ValueError("an engine owner is 'anonymous-local', 'carrier-owner:<64 hex>' or 'TENANT|PRINCIPAL'")
    return owner_scope(tenant, principal)


def _pack_str(text: str) -> bytes:
    data = text.encode("utf-8")
    n = len(data)
    if n < 32:
        return bytes([0xA0 | n]) + data
    if n < 1 << 8:
        return b"\xd9" + n.to_bytes(1, "big") + data
    if n < 1 << 16:
        return b"\xda" + n.to_bytes(2, "big") + data
    return b"\xdb" + n.to_bytes(4, "big") + data


def _pack_uint(value: int) -> bytes:
    if value < 0x80:
        return bytes([value])
    for marker, width in ((0xCC, 1), (0xCD, 2), (0xCE, 4), (0xCF, 8)):
        if value < 1 << (8 * width):
            return bytes([marker]) + value.to_bytes(width, "big")
    raise ValueError("integer too large for MessagePack")


def _pack_len(n: int, fix: int, short: int) -> bytes:
    """An array (fix 0x90) or map (fix 0x80) header of ``n`` items, MessagePack's compact form."""
    if n < 16:
        return bytes([fix | n])
    if n < 1 << 16:
        return bytes([short]) + n.to_bytes(2, "big")
    return bytes([short + 1]) + n.to_bytes(4, "big")


def _manifest(scope: str, chunks: Sequence[str], lengths: Sequence[int], total: int, chunk_size: int) -> bytes:
    """The manifest as the engine's ``rmp_serde::to_vec_named`` writes it: a map, fields in order,
    every integer in its smallest encoding."""
    out = [_pack_len(6, 0x80, 0xDE)]
    out += [_pack_str("schema_version"), _pack_uint(_MANIFEST_VERSION)]
    out += [_pack_str("owner_scope"), _pack_str(scope)]
    out += [_pack_str("chunks"), _pack_len(len(chunks), 0x90, 0xDC), *(_pack_str(c) for c in chunks)]
    out += [_pack_str("chunk_lens"), _pack_len(len(lengths), 0x90, 0xDC), *(_pack_uint(n) for n in lengths)]
    out += [_pack_str("len"), _pack_uint(total), _pack_str("chunk_size"), _pack_uint(chunk_size)]
    return b"".join(out)


@dataclass(frozen=True)
class ChunkHashes:
    """What the engine digest needs of an artifact: each ``chunk_size`` chunk's SHA-256 (hex) and
    length, and the total; computed as the bytes pass (:mod:`mediafleet.mcp.inline`) or from bytes
    held (:func:`chunk_hashes`)."""

    hashes: tuple[str, ...]
    lengths: tuple[int, ...]
    total: int
    chunk_size: int = ENGINE_CHUNK_SIZE


def chunk_hashes(data: bytes, chunk_size: int = ENGINE_CHUNK_SIZE) -> ChunkHashes:
    """The :class:`ChunkHashes` of ``data`` held whole."""
    view = memoryview(data)
    spans = range(0, len(data), chunk_size)
    return ChunkHashes(tuple(hashlib.sha256(view[i:i + chunk_size]).hexdigest() for i in spans),
                       tuple(min(chunk_size, len(data) - i) for i in spans), len(data), chunk_size)


def _engine_digest(chunks: ChunkHashes, scope: str) -> str:
    return hashlib.sha256(_manifest(scope, chunks.hashes, chunks.lengths, chunks.total, chunks.chunk_size)).hexdigest()


def engine_blob_digest(data: bytes, scope: str, chunk_size: int = ENGINE_CHUNK_SIZE) -> str:
    """The engine's blob digest of ``data`` uploaded by an owner of ``scope`` in ``chunk_size`` chunks."""
    return _engine_digest(chunk_hashes(data, chunk_size), scope)


def check(digest: object, data: bytes | ChunkHashes, sha256_hex: str, owners: Iterable[str] = (),
          chunk_size: int = ENGINE_CHUNK_SIZE) -> CallerClaims:
    """Check the caller's ``digest`` against ``data`` (whose SHA-256 is ``sha256_hex``): the bytes,
    or their :class:`ChunkHashes` (then ``chunk_size`` is theirs).

    Raises:
        CapabilityRefused: the digest is not 64 hex characters (with or without ``sha256:``).
        IntegrityError: a comparison was made and failed (``digest_mismatch``).
    """
    match = _DIGEST.fullmatch(digest) if isinstance(digest, str) else None
    if match is None:
        raise CapabilityRefused("digest must be 64 hex characters: the engine blob digest, or 'sha256:' and the "
                                "SHA-256 of the bytes", code=ErrorCode.INVALID_REQUEST)
    prefixed, hex_digest = match.group(1) is not None, match.group(2).lower()
    shown = ("sha256:" if prefixed else "") + hex_digest
    if hex_digest == sha256_hex:
        return CallerClaims(digest=shown, digest_form="sha256", digest_check="sha256_of_bytes")
    if prefixed:
        raise IntegrityError("the artifact's bytes do not match the digest given", phase=Phase.REQUEST)
    scopes = list(owners)
    if not scopes:
        return CallerClaims(digest=shown, digest_form="engine_blob", digest_check="not_compared")
    chunks = data if isinstance(data, ChunkHashes) else chunk_hashes(data, chunk_size)
    for scope in scopes:
        if _engine_digest(chunks, scope) == hex_digest:
            return CallerClaims(digest=shown, digest_form="engine_blob", digest_check="engine_blob_manifest")
    raise IntegrityError("the digest is neither the SHA-256 of the bytes nor their engine blob digest for any "
                         "configured engine owner", phase=Phase.REQUEST)
