"""The two-host bed itself: each host has its own name, its own /dev/shm and its own pid space,
reaches Redis and PostgreSQL over its veth, cannot reach the other host, and leaves nothing
behind once removed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from host_bed import HostBed
from hosts_stack import TcpRedis
from procs import PYTHON, REPO, wait_for
from tcp_relay import TcpRelay

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PROBE = """
import json, os, socket, sys
import psycopg, redis
redis_url, database_url, other = sys.argv[1:4]
open("/dev/shm/omnistage_probe", "w").close()
try:
    socket.create_connection((other, 9), timeout=2).close()
    other_reached = True
except OSError:
    other_reached = False
with psycopg.connect(database_url, connect_timeout=5) as db:
    database = db.execute("select 1").fetchone()[0]
print(json.dumps({
    "hostname": socket.gethostname(),
    "shm": sorted(os.listdir("/dev/shm")),
    "pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()),
    "redis": redis.Redis.from_url(redis_url, socket_timeout=5).ping(),
    "database": database,
    "other_reached": other_reached,
}))
"""


def test_each_host_has_its_own_name_shared_memory_and_pids_and_reaches_only_the_services(
    bed: HostBed, database_url, tmp_path: Path
):
    server = TcpRedis(tmp_path / "redis", bed.root_ips).start()
    relays = [TcpRelay(host.root_ip, ("127.0.0.1", 5432)) for host in bed.hosts.values()]
    try:
        seen = {}
        for (name, host), relay, other in zip(bed.hosts.items(), relays, ["b", "a"], strict=True):
            database = database_url.replace("127.0.0.1:5432", f"{host.root_ip}:{relay.port}")
            argv = bed.argv(name, [PYTHON, "-c", PROBE, server.url(host.root_ip), database, bed[other].host_ip])
            done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=60, check=False)
            assert done.returncode == 0, done.stderr
            seen[name] = json.loads(done.stdout)
    finally:
        server.stop()
        for relay in relays:
            relay.close()

    assert {name: probe["hostname"] for name, probe in seen.items()} == {"a": "host-a", "b": "host-b"}
    assert all(probe["shm"] == ["omnistage_probe"] for probe in seen.values())  # each its own, empty before
    assert not Path("/dev/shm/omnistage_probe").exists()
    assert all(probe["pids"][0] == 1 and len(probe["pids"]) < 10 for probe in seen.values())
    assert all(probe["redis"] and probe["database"] == 1 for probe in seen.values())
    assert not any(probe["other_reached"] for probe in seen.values())


def test_removing_the_bed_kills_its_processes_and_deletes_its_namespaces_and_links(namespaces_ok):
    bed = HostBed(["a"], tag="rm").create()
    sleeper = subprocess.Popen(bed.argv("a", ["sleep", "300"]), start_new_session=True)
    try:
        wait_for(lambda: bed.pids("a"), timeout=10, what="the host's process")
    finally:
        bed.remove()
    sleeper.wait(timeout=10)
    assert bed.pids("a") == []
    names = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert bed["a"].netns not in names and bed["a"].root_if not in links
