"""A Redis Sentinel deployment on loopback for the tests: a master, replicas and sentinels, each a
real ``redis-server`` process (sentinels as ``redis-server CONF --sentinel``, what Debian's
``redis-sentinel`` runs), with short down-after and failover times so a failover takes seconds.

Nothing here imports pytest (a benchmark may start one too). :meth:`SentinelCluster.start` returns
once every node answers, the replicas are in sync and every sentinel sees the master.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

from tests.servers import RedisServer, ServerFailed, free_port

__all__ = ["MASTER_NAME", "SentinelCluster", "SentinelNode"]

MASTER_NAME = "mediafleet"


def _ask(port: int, *words: str, timeout: float = 1.0) -> bytes:
    """One command in the inline protocol, its raw reply (b'' when nothing answers)."""
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall((" ".join(words) + "\r\n").encode())
            return s.recv(65536)
    except OSError:
        return b""


class SentinelNode(RedisServer):
    """One sentinel: ``redis-server sentinel.conf --sentinel`` on a free loopback port."""

    name = "redis-sentinel"

    def __init__(self, workdir: Path, master_port: int, quorum: int, down_after_ms: int, failover_ms: int) -> None:
        super().__init__(workdir)
        self.master_port = master_port
        self.quorum = quorum
        self.down_after_ms = down_after_ms
        self.failover_ms = failover_ms

    @property
    def url(self) -> str:
        return f"sentinel://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        exe = shutil.which("redis-server")
        if exe is None:
            raise ServerFailed("redis-server is not installed; run tests/run.sh, which installs it")
        self.workdir.mkdir(parents=True, exist_ok=True)
        conf = self.workdir / "sentinel.conf"
        # A sentinel rewrites its own configuration file (the master it follows, the replicas it found).
        conf.write_text(
            f"port {self.port}\nbind 127.0.0.1\ndir {self.workdir}\nprotected-mode no\n"
            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.master_port} {self.quorum}\n"
            f"sentinel down-after-milliseconds {MASTER_NAME} {self.down_after_ms}\n"
            f"sentinel failover-timeout {MASTER_NAME} {self.failover_ms}\n"
            f"sentinel parallel-syncs {MASTER_NAME} 2\n")
        return [exe, str(conf), "--sentinel"]


@dataclass
class SentinelCluster:
    """``replicas`` replicas of one master and ``sentinels`` sentinels watching it (quorum 2).

    ``down_after_ms`` is how long a master must not answer before sentinels call it down; a
    failover then takes about that plus a second here.
    """

    workdir: Path
    replicas: int = 2
    sentinels: int = 3
    down_after_ms: int = 1000
    failover_ms: int = 3000
    nodes: list[RedisServer] = field(default_factory=list)
    watchers: list[SentinelNode] = field(default_factory=list)

    def start(self, timeout: float = 30.0) -> Self:
        master = RedisServer(self.workdir / "node0", appendonly=True,
                             args=["--replica-announce-ip", "127.0.0.1", "--min-replicas-to-write", "0"])
        master.start()
        self.nodes.append(master)
        for i in range(self.replicas):
            node = RedisServer(self.workdir / f"node{i + 1}", appendonly=True,
                               args=["--replicaof", "127.0.0.1", str(master.port),
                                     "--replica-announce-ip", "127.0.0.1"])
            node.start()
            self.nodes.append(node)
        for i in range(self.sentinels):
            watcher = SentinelNode(self.workdir / f"sentinel{i}", master.port, quorum=2,
                                   down_after_ms=self.down_after_ms, failover_ms=self.failover_ms)
            watcher.start()
            self.watchers.append(watcher)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._settled(master.port):
                return self
            time.sleep(0.1)
        self.stop()
        raise ServerFailed("the sentinel deployment did not settle")

    def _settled(self, master_port: int) -> bool:
        """The replicas are linked to the master and every sentinel knows of them all."""
        info = _ask(master_port, "INFO", "replication")
        if f"connected_slaves:{self.replicas}".encode() not in info or info.count(b"state=online") < self.replicas:
            return False
        for watcher in self.watchers:
            reply = _ask(watcher.port, "SENTINEL", "REPLICAS", MASTER_NAME)
            if reply.count(b"\r\nip\r\n") < self.replicas:
                return False
        return True

    @property
    def broker_url(self) -> str:
        """What ``MEDIAFLEET_BROKER_URL`` names: every sentinel, ``;``-separated."""
        return ";".join(w.url for w in self.watchers)

    def master_port(self) -> int | None:
        """The port the sentinels now name as master (None while none answers)."""
        for watcher in self.watchers:
            reply = _ask(watcher.port, "SENTINEL", "GET-MASTER-ADDR-BY-NAME", MASTER_NAME)
            parts = reply.split(b"\r\n")
            if len(parts) >= 5 and parts[0] == b"*2":
                return int(parts[4])
        return None

    def master(self) -> RedisServer:
        port = self.master_port()
        for node in self.nodes:
            if node.port == port:
                return node
        raise ServerFailed(f"no node of this deployment is the master the sentinels name ({port})")

    def role(self, node: RedisServer) -> str:
        """``master``, ``slave``, or ``''`` for a node that does not answer."""
        reply = _ask(node.port, "ROLE")
        for role in (b"master", b"slave"):
            if role in reply[:32]:
                return role.decode()
        return ""

    def wait_failover(self, old_port: int, timeout: float = 30.0) -> float:
        """Seconds until the sentinels name a master other than ``old_port`` that answers as one."""
        began = time.monotonic()
        while time.monotonic() - began < timeout:
            port = self.master_port()
            if port is not None and port != old_port and b"master" in _ask(port, "ROLE")[:32]:
                return time.monotonic() - began
            time.sleep(0.05)
        raise ServerFailed(f"no failover from {old_port} in {timeout:.0f} s")

    def kill(self, node: RedisServer) -> None:
        """``kill -9`` of one node (it is left dead: :meth:`revive` starts it again on its port)."""
        assert node.proc is not None
        node.proc.send_signal(signal.SIGKILL)
        node.proc.wait(timeout=10)
        node.proc = None

    def revive(self, node: RedisServer) -> None:
        """Start a killed node again on its port, as the replica of the current master."""
        new = self.master_port()
        node.args = ["--replica-announce-ip", "127.0.0.1", "--replicaof", "127.0.0.1", str(new)]
        node.start()

    @staticmethod
    def freeze(node: RedisServer) -> None:
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGSTOP)

    @staticmethod
    def thaw(node: RedisServer) -> None:
        assert node.proc is not None
        os.kill(node.proc.pid, signal.SIGCONT)

    def stop(self) -> None:
        for server in [*self.watchers, *self.nodes]:
            if server.proc is not None:
                try:
                    os.kill(server.proc.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            try:
                server.stop()
            except (OSError, subprocess.TimeoutExpired):
                if server.proc is not None:
                    server.proc.kill()
                    server.proc = None
        self.watchers.clear()
        self.nodes.clear()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

