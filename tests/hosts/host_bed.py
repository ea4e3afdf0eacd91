"""Several "hosts" on one machine: one network namespace each, joined to the root namespace by
a veth pair with a private /30, nothing routed beyond it.

A process started on a host (`HostBed.argv`) also gets its own hostname (UTS namespace: the
platform names a host by `socket.gethostname()`), its own /dev/shm (a mount namespace with a
private tmpfs there: shared-memory payloads of one host cannot be mapped on another), its own
System V IPC and its own pid space (so `/proc`, which the workers read to find the replica hosts
they run, lists only that host's processes). Killing a host whole is one SIGKILL of its pid
namespace's first process (the kernel kills the rest); a partition is its veth pair taken down.

Needs root (or CAP_NET_ADMIN + CAP_SYS_ADMIN), `ip` and `unshare`; `available()` says why not.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

SHM_SIZE = "2g"
_INIT = (
    'hostname "$1" && shift && mount -t tmpfs -o size=' + SHM_SIZE + ",mode=1777 tmpfs /dev/shm || exit 97\n"
    '"$@" &\n'
    "wait $!"
)
"""The first process of a host's pid namespace: names the host, mounts its /dev/shm, runs the
command and waits for it (pid 1 of a namespace also reaps the orphans of its processes)."""


@dataclass(frozen=True)
class NetHost:
    name: str
    netns: str
    hostname: str
    root_if: str
    host_if: str
    root_ip: str
    host_ip: str


def _ip(*args: str, netns: str | None = None, check: bool = True) -> subprocess.CompletedProcess:
    argv = ["ip", *(["-n", netns] if netns else []), *args]
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=30)


def available() -> str | None:
    """None when namespaces can be made here, else why not."""
    for tool in ("ip", "unshare", "taskset"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed"
    probe = f"omh-probe-{os.getpid()}"
    made = _ip("netns", "add", probe, check=False)
    if made.returncode != 0:
        return f"cannot create a network namespace (`ip netns add`: {made.stderr.strip() or made.returncode})"
    try:
        inside = subprocess.run(
            ["ip", "netns", "exec", probe, "unshare", "--mount", "--uts", "--ipc", "--pid", "--fork",
             "--mount-proc", "--propagation", "private", "sh", "-c", "mount -t tmpfs tmpfs /dev/shm && hostname x"],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
        if inside.returncode != 0:
            return f"cannot unshare mount/uts/pid namespaces inside one: {inside.stderr.strip()}"
    finally:
        _ip("netns", "del", probe, check=False)
    return None


class HostBed:
    """Hosts named `names` ("a", "b" …), each in 10.213.X.0/30 (root side .1, host side .2)."""

    def __init__(self, names: list[str], tag: str | None = None):
        tag = tag or str(os.getpid() % 10000)
        worker = int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw"))
        base = (worker * 15 + os.getpid() % 15) * 4  # parallel test workers never share a subnet
        self.hosts: dict[str, NetHost] = {}
        for index, name in enumerate(names):
            octet = base + index
            self.hosts[name] = NetHost(
                name=name,
                netns=f"omh-{tag}-{name}",
                hostname=f"host-{name}",
                root_if=f"omh{tag}{name}0"[:15],
                host_if=f"omh{tag}{name}1"[:15],
                root_ip=f"10.213.{octet}.1",
                host_ip=f"10.213.{octet}.2",
            )

    def __getitem__(self, name: str) -> NetHost:
        return self.hosts[name]

    @property
    def root_ips(self) -> list[str]:
        return [host.root_ip for host in self.hosts.values()]

    # ------------------------------------------------------------------ making and removing

    def create(self) -> HostBed:
        try:
            for host in self.hosts.values():
                self._create(host)
        except BaseException:
            self.remove()
            raise
        return self

    def _create(self, host: NetHost) -> None:
        _ip("netns", "add", host.netns)
        _ip("link", "add", host.root_if, "type", "veth", "peer", "name", host.host_if)
        _ip("link", "set", host.host_if, "netns", host.netns)
        _ip("addr", "add", f"{host.root_ip}/30", "dev", host.root_if)
        _ip("link", "set", host.root_if, "up")
        _ip("addr", "add", f"{host.host_ip}/30", "dev", host.host_if, netns=host.netns)
        _ip("link", "set", host.host_if, "up", netns=host.netns)
        _ip("link", "set", "lo", "up", netns=host.netns)

    def remove(self) -> None:
        """Kill every process of every host, then remove the namespaces and veths (idempotent)."""
        for host in self.hosts.values():
            self.kill(host.name)
            _ip("netns", "del", host.netns, check=False)
            _ip("link", "del", host.root_if, check=False)  # gone with its peer already, normally

    # ------------------------------------------------------------------ processes

    def argv(self, name: str, argv: list[str], cpus: str | None = None) -> list[str]:
        """`argv` run on host `name` (pinned to `cpus`, a taskset list, when given)."""
        host = self.hosts[name]
        pinned = ["taskset", "-c", cpus] if cpus else []
        return [
            "ip", "netns", "exec", host.netns, *pinned,
            "unshare", "--mount", "--uts", "--ipc", "--pid", "--fork", "--mount-proc", "--propagation", "private",
            "sh", "-c", _INIT, "host-init", host.hostname, *argv,
        ]  # fmt: skip

    def pids(self, name: str) -> list[int]:
        """Every process in the host's network namespace."""
        listed = subprocess.run(
            ["ip", "netns", "pids", self.hosts[name].netns], capture_output=True, text=True, timeout=30, check=False
        )
        return [int(pid) for pid in listed.stdout.split() if pid.isdigit()]

    def kill(self, name: str, timeout: float = 15.0) -> None:
        """SIGKILL every process of the host at once (its pid namespaces' first processes first:
        the kernel then kills all of their processes), and wait until none is left."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids(name)
            if not pids:
                return
            for pid in sorted(pids, key=_is_namespace_init, reverse=True):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"host {name}: processes {pids} survived SIGKILL")
            time.sleep(0.05)

    def terminate(self, name: str, timeout: float = 15.0) -> None:
        """SIGTERM every process of the host; SIGKILL what is left after `timeout`."""
        for pid in self.pids(name):
            try:
                os.kill(pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        while self.pids(name) and time.monotonic() < deadline:
            time.sleep(0.1)
        self.kill(name)

    # ------------------------------------------------------------------ the network

    def partition(self, name: str) -> None:
        """Cut the host off: its veth pair goes down (its packets are dropped, no reset is sent)."""
        _ip("link", "set", self.hosts[name].root_if, "down")

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].root_if, "up")


def _is_namespace_init(pid: int) -> bool:
    """Whether `pid` is the first process of a pid namespace (pid 1 inside it)."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            return line.split()[-1] == "1"
    return False
