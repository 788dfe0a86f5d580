"""mediafleet.contract.digests: the one digest pattern, blob references, chunked hashing; and the
store key that the local and S3 stores both derive from a digest."""

from __future__ import annotations

import hashlib
import io
from pathlib import Path

import pytest

from mediafleet.blobs.protocol import blob_key
from mediafleet.contract import ErrorCode, IntegrityError
from mediafleet.contract.digests import (
    CHUNK,
    DIGEST,
    DIGEST_BYTES,
    blob_ref,
    check_digest,
    copy_hashing,
    digest_of_ref,
    hash_bytes,
    hash_file,
    hash_stream,
)

_HEX = hashlib.sha256(b"x").hexdigest()
# Over two chunks and not a multiple of one: the chunk boundaries are where a hashing loop goes wrong.
_DATA = bytes(range(256)) * (2 * CHUNK // 256) + b"tail"


def test_a_digest_is_sha256_and_64_lowercase_hex() -> None:
    assert check_digest(f"sha256:{_HEX}") == f"sha256:{_HEX}"
    for bad in (_HEX, f"sha256:{_HEX.upper()}", f"sha256:{_HEX}0", f"md5:{_HEX}", f"sha256:{_HEX[:-1]}g"):
        with pytest.raises(ValueError, match="64 lowercase hex"):
            check_digest(bad)
    assert DIGEST_BYTES.findall(f'{{"a": "sha256:{_HEX}"}}'.encode()) == [f"sha256:{_HEX}".encode()]
    assert DIGEST.pattern == DIGEST_BYTES.pattern.decode()


def test_blob_references_and_digests_turn_into_each_other() -> None:
    assert blob_ref(f"sha256:{_HEX}") == f"blob:{_HEX}"
    assert digest_of_ref(f"blob:{_HEX}") == digest_of_ref(f"sha256:{_HEX}") == f"sha256:{_HEX}"
    assert digest_of_ref(f"blob:{_HEX.upper()}") is None and digest_of_ref(f"file:{_HEX}") is None
    with pytest.raises(ValueError):
        blob_ref(f"blob:{_HEX}")


def test_every_way_of_hashing_agrees_with_hashlib(tmp_path: Path) -> None:
    expected = "sha256:" + hashlib.sha256(_DATA).hexdigest()
    path = tmp_path / "data.bin"
    path.write_bytes(_DATA)
    assert hash_bytes(_DATA) == hash_stream(io.BytesIO(_DATA)) == hash_file(path) == expected
    out = io.BytesIO()
    assert copy_hashing(io.BytesIO(_DATA), out, 4096) == (expected, len(_DATA), _DATA[:4096])
    assert out.getvalue() == _DATA


def test_a_store_key_is_sharded_and_only_from_a_digest() -> None:
    assert blob_key(f"sha256:{_HEX}") == f"sha256/{_HEX[:2]}/{_HEX[2:4]}/{_HEX}"
    for bad in ("sha256:../../etc/passwd", f"sha256:{_HEX}/..", _HEX, f"blob:{_HEX}"):
        with pytest.raises(IntegrityError) as err:
            blob_key(bad)
        assert err.value.code == ErrorCode.BLOB_NOT_FOUND
