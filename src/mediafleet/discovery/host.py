"""The host contract's state: bindings, leases with a navigation budget, credentials, reservations.

Trusted Python API, never model-callable. One SQLite file (WAL) holds it, so it survives a crash
and a restart:

* a **binding** is (workspace, subject, agent); disabling it fails every lease of it closed;
* a **lease** is for one binding and one turn: an expiry, a :class:`NavigationBudget`, and the
  scope generation pinned when it was opened (a change of the evidence fails it closed);
* a **credential** is the binding's scoped bearer credential: ``mfdc1.<id>.<secret>``, stored as
  a SHA-256 of the secret; opening a lease mints a new one and retires the binding's earlier ones,
  so a replayed old credential is refused;
* an **operation** is reserved (counted in ``operations_used``) in its own committed transaction
  before any work, and is committed together with its encrypted receipt before anything is
  returned. After a crash, an operation left reserved is marked ``uncertain``: it stays counted, it
  is never retried, and the lease is never reset.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mediafleet.discovery.errors import DiscoveryError, Refusal
from mediafleet.discovery.receipt import SealedReceipt
from mediafleet.discovery.units import Scope

__all__ = ["Binding", "Lease", "LeaseHost", "NavigationBudget", "Reservation"]

_CREDENTIAL = re.compile(r"mfdc1\.([0-9a-f]{32})\.([0-9a-f]{64})")
LEASE_ID = re.compile(r"mfl-[0-9a-f]{32}")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS bindings (
    binding_id TEXT PRIMARY KEY, workspace TEXT NOT NULL, subject TEXT NOT NULL, agent TEXT NOT NULL,
    disabled INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL, UNIQUE (workspace, subject, agent));
CREATE TABLE IF NOT EXISTS credentials (
    credential_id TEXT PRIMARY KEY, binding_id TEXT NOT NULL REFERENCES bindings, secret_sha256 TEXT NOT NULL,
    revoked INTEGER NOT NULL DEFAULT 0, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS leases (
    lease_id TEXT PRIMARY KEY, binding_id TEXT NOT NULL REFERENCES bindings, turn TEXT NOT NULL,
    opened_at REAL NOT NULL, expires_at REAL NOT NULL, max_operations INTEGER NOT NULL,
    max_evidence INTEGER NOT NULL, max_characters INTEGER NOT NULL, generation INTEGER NOT NULL,
    operations_used INTEGER NOT NULL DEFAULT 0, evidence_used INTEGER NOT NULL DEFAULT 0,
    characters_used INTEGER NOT NULL DEFAULT 0, revoked INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS operations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, lease_id TEXT NOT NULL REFERENCES leases, tool TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('reserved', 'prepared', 'failed', 'uncertain')),
    error_code TEXT, reserved_at REAL NOT NULL, finished_at REAL, evidence INTEGER, characters INTEGER);
CREATE TABLE IF NOT EXISTS receipts (
    request_id TEXT PRIMARY KEY, lease_id TEXT NOT NULL REFERENCES leases, seq INTEGER NOT NULL REFERENCES operations,
    key_id TEXT NOT NULL, nonce BLOB NOT NULL, ciphertext BLOB NOT NULL, created_at REAL NOT NULL);
"""


@dataclass(frozen=True)
class NavigationBudget:
    """What one lease may spend: operations, evidence units delivered, characters delivered."""

    operations: int
    evidence: int
    characters: int

    def __post_init__(self) -> None:
        for value in (self.operations, self.evidence, self.characters):
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 10**9:
                raise ValueError("every navigation budget figure is an integer from 1 to 10**9")


@dataclass(frozen=True)
class Binding:
    binding_id: str
    workspace: str
    subject: str
    agent: str
    disabled: bool

    @property
    def scope(self) -> Scope:
        return Scope(self.workspace, self.subject)


@dataclass(frozen=True)
class Lease:
    lease_id: str
    binding_id: str
    turn: str
    opened_at: float
    expires_at: float
    budget: NavigationBudget
    generation: int
    operations_used: int
    evidence_used: int
    characters_used: int
    revoked: bool

    def public(self) -> dict[str, Any]:
        """The lease as the host prints it (no credential)."""
        return {
            "lease_id": self.lease_id, "binding_id": self.binding_id, "turn": self.turn,
            "expires_at": self.expires_at, "generation": self.generation, "revoked": self.revoked,
            "budget": {"operations": self.budget.operations, "evidence": self.budget.evidence,
                       "characters": self.budget.characters},
            "used": {"operations": self.operations_used, "evidence": self.evidence_used,
                     "characters": self.characters_used},
        }


@dataclass(frozen=True)
class Reservation:
    """One counted operation, not yet prepared."""

    seq: int
    request_id: str
    tool: str
    binding: Binding
    lease: Lease  # as it stood right after the reservation


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode("ascii")).hexdigest()


def _lease(row: sqlite3.Row) -> Lease:
    return Lease(
        lease_id=row["lease_id"], binding_id=row["binding_id"], turn=row["turn"], opened_at=row["opened_at"],
        expires_at=row["expires_at"],
        budget=NavigationBudget(row["max_operations"], row["max_evidence"], row["max_characters"]),
        generation=row["generation"], operations_used=row["operations_used"], evidence_used=row["evidence_used"],
        characters_used=row["characters_used"], revoked=bool(row["revoked"]),
    )


def _binding(row: sqlite3.Row) -> Binding:
    return Binding(row["binding_id"], row["workspace"], row["subject"], row["agent"], bool(row["disabled"]))


class LeaseHost:
    """The host's lease store in one SQLite file.

    Args:
        path: the state file (created with its schema when missing).
        clock: seconds since the epoch (tests pass their own to expire leases).
    """

    def __init__(self, path: Path, *, clock: Callable[[], float] = time.time) -> None:
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        path.touch(mode=0o600, exist_ok=True)  # before SQLite opens it: its -wal and -shm take this mode
        self._db = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
        self._db.row_factory = sqlite3.Row
        self._lock = threading.Lock()
        self._clock = clock
        self._db.execute("PRAGMA journal_mode = WAL")
        self._db.execute("PRAGMA synchronous = FULL")  # a reservation is durable once committed
        self._db.execute("PRAGMA foreign_keys = ON")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # -- the administrator's side -----------------------------------------------------------------

    def bind(self, scope: Scope, agent: str) -> Binding:
        """The binding for (workspace, subject, agent), created when new (a disabled one stays disabled)."""
        Scope(agent)  # the same naming rule as a workspace
        with self._write() as db:
            db.execute("INSERT INTO bindings (binding_id, workspace, subject, agent, created_at) VALUES (?, ?, ?, ?, ?) "
                       "ON CONFLICT (workspace, subject, agent) DO NOTHING",
                       ("mfb-" + secrets.token_hex(16), scope.workspace, scope.subject, agent, self._clock()))
            row = db.execute("SELECT * FROM bindings WHERE workspace = ? AND subject = ? AND agent = ?",
                             (scope.workspace, scope.subject, agent)).fetchone()
        return _binding(row)

    def binding(self, binding_id: str) -> Binding | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM bindings WHERE binding_id = ?", (binding_id,)).fetchone()
        return _binding(row) if row else None

    def disable_binding(self, binding_id: str) -> bool:
        """Disable a binding: its leases and credentials fail closed from now on. True if it existed."""
        with self._write() as db:
            return db.execute("UPDATE bindings SET disabled = 1 WHERE binding_id = ?", (binding_id,)).rowcount == 1

    def open_lease(self, binding: Binding, *, ttl_s: float, budget: NavigationBudget, generation: int,
                   turn: str | None = None) -> tuple[Lease, str]:
        """Open a lease for one turn; returns it and the binding's new bearer credential.

        The credential is returned once and stored only as a hash; the binding's earlier
        credentials are retired.

        Raises:
            DiscoveryError: the binding is disabled (``binding_disabled``).
            ValueError: ``ttl_s`` is not positive.
        """
        if not ttl_s > 0:
            raise ValueError("a lease's ttl must be > 0 seconds")
        lease_id = "mfl-" + secrets.token_hex(16)
        credential_id, secret = secrets.token_hex(16), secrets.token_hex(32)
        now = self._clock()
        with self._write() as db:
            row = db.execute("SELECT disabled FROM bindings WHERE binding_id = ?", (binding.binding_id,)).fetchone()
            if row is None or row["disabled"]:
                raise DiscoveryError(Refusal.BINDING_DISABLED)
            db.execute("UPDATE credentials SET revoked = 1 WHERE binding_id = ?", (binding.binding_id,))
            db.execute("INSERT INTO credentials (credential_id, binding_id, secret_sha256, created_at) VALUES (?, ?, ?, ?)",
                       (credential_id, binding.binding_id, _hash(secret), now))
            db.execute("INSERT INTO leases (lease_id, binding_id, turn, opened_at, expires_at, max_operations, "
                       "max_evidence, max_characters, generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                       (lease_id, binding.binding_id, turn or lease_id, now, now + ttl_s, budget.operations,
                        budget.evidence, budget.characters, generation))
            lease = _lease(db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone())
        return lease, f"mfdc1.{credential_id}.{secret}"

    def revoke_lease(self, lease_id: str) -> bool:
        """Revoke a lease; True if it existed. Operations in flight fail closed at their commit."""
        with self._write() as db:
            return db.execute("UPDATE leases SET revoked = 1 WHERE lease_id = ?", (lease_id,)).rowcount == 1

    def lease(self, lease_id: str) -> Lease | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone()
        return _lease(row) if row else None

    def operations(self, lease_id: str) -> list[dict[str, Any]]:
        """The lease's operations, oldest first (state, tool, request id, what was delivered)."""
        with self._lock:
            rows = self._db.execute("SELECT * FROM operations WHERE lease_id = ? ORDER BY seq", (lease_id,)).fetchall()
        return [{"request_id": request_id(r["seq"]), "tool": r["tool"], "state": r["state"],
                 "error_code": r["error_code"], "evidence": r["evidence"], "characters": r["characters"]} for r in rows]

    def receipt(self, request_id_: str) -> SealedReceipt | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM receipts WHERE request_id = ?", (request_id_,)).fetchone()
        if row is None:
            return None
        return SealedReceipt(row["request_id"], row["lease_id"], row["key_id"], bytes(row["nonce"]),
                             bytes(row["ciphertext"]))

    def recover(self) -> int:
        """After a crash or restart: operations left reserved become ``uncertain`` (still counted,
        never retried). Returns how many. Call it once when the serving process starts."""
        with self._write() as db:
            return db.execute("UPDATE operations SET state = 'uncertain', finished_at = ? WHERE state = 'reserved'",
                              (self._clock(),)).rowcount

    # -- the operations' side -------------------------------------------------------------------

    def _check(self, db: sqlite3.Connection, credential: str, lease_id: str) -> tuple[Binding, Lease]:
        match = _CREDENTIAL.fullmatch(credential) if isinstance(credential, str) else None
        if match is None:
            raise DiscoveryError(Refusal.UNAUTHENTICATED)
        row = db.execute("SELECT * FROM credentials WHERE credential_id = ?", (match.group(1),)).fetchone()
        if row is None or not hmac.compare_digest(row["secret_sha256"], _hash(match.group(2))):
            raise DiscoveryError(Refusal.UNAUTHENTICATED)
        if row["revoked"]:
            raise DiscoveryError(Refusal.CREDENTIAL_REVOKED)
        binding = _binding(db.execute("SELECT * FROM bindings WHERE binding_id = ?", (row["binding_id"],)).fetchone())
        if binding.disabled:
            raise DiscoveryError(Refusal.BINDING_DISABLED)
        lease_row = db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone()
        if lease_row is None:
            raise DiscoveryError(Refusal.LEASE_NOT_FOUND)
        lease = _lease(lease_row)
        if lease.binding_id != binding.binding_id:
            raise DiscoveryError(Refusal.LEASE_OF_ANOTHER_BINDING)
        if lease.revoked:
            raise DiscoveryError(Refusal.LEASE_REVOKED)
        if self._clock() >= lease.expires_at:
            raise DiscoveryError(Refusal.LEASE_EXPIRED)
        return binding, lease

    def reserve(self, credential: str, lease_id: str, tool: str) -> Reservation:
        """Authenticate, check the lease, and count one operation, durably, before any work.

        Raises:
            DiscoveryError: any check failed (nothing is counted then).
        """
        with self._write() as db:
            binding, lease = self._check(db, credential, lease_id)
            if lease.operations_used >= lease.budget.operations:
                raise DiscoveryError(Refusal.BUDGET_EXHAUSTED, "no operations left")
            if lease.evidence_used >= lease.budget.evidence or lease.characters_used >= lease.budget.characters:
                raise DiscoveryError(Refusal.BUDGET_EXHAUSTED, "no evidence left to deliver")
            seq = db.execute("INSERT INTO operations (lease_id, tool, state, reserved_at) VALUES (?, ?, 'reserved', ?)",
                             (lease_id, tool, self._clock())).lastrowid
            db.execute("UPDATE leases SET operations_used = operations_used + 1 WHERE lease_id = ?", (lease_id,))
            lease = _lease(db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease_id,)).fetchone())
        assert seq is not None
        return Reservation(seq, request_id(seq), tool, binding, lease)

    def commit(self, reservation: Reservation, credential: str, sealed: SealedReceipt, evidence: int,
               characters: int) -> Lease:
        """Persist the receipt and what the operation delivers, after checking the lease again.

        Raises:
            DiscoveryError: the lease was revoked, its binding disabled, or it expired meanwhile, or
                the delivery would overspend it; the operation is then marked failed (still
                counted) and nothing may be returned.
        """
        try:
            with self._write() as db:
                _, lease = self._check(db, credential, reservation.lease.lease_id)
                if (lease.evidence_used + evidence > lease.budget.evidence
                        or lease.characters_used + characters > lease.budget.characters):
                    raise DiscoveryError(Refusal.BUDGET_EXHAUSTED)
                db.execute("INSERT INTO receipts VALUES (?, ?, ?, ?, ?, ?, ?)",
                           (sealed.request_id, sealed.lease_id, reservation.seq, sealed.key_id, sealed.nonce,
                            sealed.ciphertext, self._clock()))
                db.execute("UPDATE operations SET state = 'prepared', finished_at = ?, evidence = ?, characters = ? "
                           "WHERE seq = ? AND state = 'reserved'", (self._clock(), evidence, characters, reservation.seq))
                db.execute("UPDATE leases SET evidence_used = evidence_used + ?, characters_used = characters_used + ? "
                           "WHERE lease_id = ?", (evidence, characters, lease.lease_id))
                return _lease(db.execute("SELECT * FROM leases WHERE lease_id = ?", (lease.lease_id,)).fetchone())
        except DiscoveryError as exc:
            self.fail(reservation, exc.code)
            raise

    def fail(self, reservation: Reservation, code: Refusal) -> None:
        """Mark a reserved operation failed; it stays counted."""
        with self._write() as db:
            db.execute("UPDATE operations SET state = 'failed', error_code = ?, finished_at = ? "
                       "WHERE seq = ? AND state = 'reserved'", (code.value, self._clock(), reservation.seq))


def request_id(seq: int) -> str:
    """The seed's request id form: ``host-request:discovery:<n>``, n unique on this host."""
    return f"host-request:discovery:{seq}"
