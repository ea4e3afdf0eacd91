"""Large payloads between two replica hosts of a two-stage echo pipeline, as real processes
against a real Redis (the test forwards outputs between them as the orchestrator would):
shared memory when the reader runs here, freed by the reader; a reader on another host gets
the payload through its writer's export to Redis; writers release what nobody will read."""

from __future__ import annotations

import signal
import socket
import zlib

import msgspec
import pytest
from procs import wait_for
from replica_testing import finished_output, heartbeat, outputs, send_request, start_host, unique, wait_state

from stages import streams
from stages.connectors import owned_segments
from stages.echo import family as echo_family
from stages.echo_payloads import PAYLOAD_KEY, echo_payload
from stages.orchestrator.forwarding import build_stage_request
from stages.protocol import PayloadRef, Release, StageOutput, StageRequest, encode

pytestmark = pytest.mark.timeout(120)

PAYLOAD_BYTES = 300_000
CHAIN = echo_family.pipeline_named("chain")


class Chain:
    """The writer (stage `echo`, attaching PAYLOAD_BYTES to every output) and the reader
    (stage `echo2`) of one deployment."""

    def __init__(self, client, redis_url, tmp_path):
        self.client = client
        self.redis_url = redis_url
        self.tmp = tmp_path
        self.deployment = unique("deployment")
        self.writer = unique("writer")
        self.reader = unique("reader")
        self.hosts = []

    def start(self, stage: str, replica_id: str, **options) -> None:
        spec = {
            "replica_id": replica_id,
            "deployment_id": self.deployment,
            "family": "echo",
            "pipeline": msgspec.to_builtins(CHAIN),
            "stage": stage,
            "stage_id": CHAIN.stage_named(stage).id,
            "model_dir": "",
            "stage_deploy": {"options": options},
        }
        self.hosts.append(start_host(spec, self.redis_url, self.tmp / f"{stage}-{len(self.hosts)}.log"))
        wait_state(self.client, replica_id, "READY")

    def start_both(self) -> None:
        self.start("echo2", self.reader)
        self.start("echo", self.writer, payload_bytes=PAYLOAD_BYTES)

    def write(self, request_id: str, prompt: str) -> list[StageOutput]:
        """Send a request to the writer; its outputs once it finished."""
        send_request(self.client, self.writer, StageRequest(request_id=request_id, prompt=prompt))
        finished_output(self.client, self.deployment, request_id)
        return [o for o in outputs(self.client, self.deployment, request_id) if o.stage_id == 0]

    def read(self, request_id: str, written: list[StageOutput]) -> StageOutput:
        """Forward the writer's outputs to the reader chunk by chunk; the reader's last output."""
        for output in written:
            forwarded = build_stage_request(
                wire_id=request_id, source_stage=0, target_stage=1, seq=output.seq, finished=output.finished,
                outputs=[output], sampling=None, base_params={}, at=0.0,
            )  # fmt: skip
            send_request(self.client, self.reader, forwarded)
        return wait_for(
            lambda: next((o for o in outputs(self.client, self.deployment, request_id) if o.stage_id == 1
                          and o.finished), None),
            timeout=30, what=f"the reader to finish {request_id}",
        )  # fmt: skip

    def transfers(self, replica_id: str) -> dict:
        status = heartbeat(self.client, replica_id)
        return status.transfers if status else {}

    def stop(self) -> None:
        for host in self.hosts:
            host.signal(signal.SIGKILL)
            host.stop()
        for path in owned_segments(self.writer):
            path.unlink()
        keys = [streams.deployment_output(self.deployment), streams.deployment_replicas(self.deployment)]
        for replica_id in (self.writer, self.reader):
            keys += [streams.replica_input(replica_id), streams.replica_heartbeat(replica_id)]
        self.client.delete(*keys)


@pytest.fixture
def chain(client, redis_url, tmp_path):
    chain = Chain(client, redis_url, tmp_path)
    yield chain
    chain.stop()


def expected_digest(request_id: str, chunks: int) -> dict:
    crc = 0
    for seq in range(chunks):
        crc = zlib.crc32(echo_payload(request_id, seq, PAYLOAD_BYTES).data, crc)
    return {"received_payload_bytes": chunks * PAYLOAD_BYTES, "received_payload_crc32": crc}


def handles(written: list[StageOutput]) -> list[PayloadRef]:
    return [output.payloads[PAYLOAD_KEY] for output in written]


def test_a_reader_on_this_host_gets_shared_memory_and_frees_it_once_acknowledged(chain):
    chain.start_both()
    written = chain.write("local", "a b c")

    assert [(h.connector, h.host, h.owner) for h in handles(written)] == [
        ("shm", socket.gethostname(), chain.writer)
    ] * 3
    assert len(owned_segments(chain.writer)) == 3
    last = chain.read("local", written)
    assert {k: last.params[k] for k in expected_digest("local", 3)} == expected_digest("local", 3)
    read = [o for o in outputs(chain.client, chain.deployment, "local") if o.stage_id == 1]
    assert "".join(o.text for o in read) == "a b c" and read[-1] == last

    wait_for(lambda: owned_segments(chain.writer) == [], timeout=10, what="the reader to free the segments")
    wait_for(lambda: chain.transfers(chain.reader).get("shm.free", {}).get("count") == 3, timeout=10,
             what="the reader's published transfers")  # fmt: skip
    assert chain.transfers(chain.reader)["shm.get"]["bytes"] == 3 * PAYLOAD_BYTES
    wait_for(lambda: chain.transfers(chain.writer).get("shm.put", {}).get("count") == 3, timeout=10,
             what="the writer's published transfers")  # fmt: skip
    assert "redis.put" not in chain.transfers(chain.writer)


def test_without_a_live_reader_here_payloads_go_through_redis_with_a_ttl(chain, client):
    chain.start("echo", chain.writer, payload_bytes=PAYLOAD_BYTES)  # the reader is not up (yet)
    written = chain.write("remote", "a b")
    assert [h.connector for h in handles(written)] == ["redis", "redis"]
    assert all(0 < client.pttl(h.key) for h in handles(written))
    assert owned_segments(chain.writer) == []


def test_a_reader_on_another_host_gets_the_payload_through_its_writers_export(chain, client):
    chain.start_both()
    written = chain.write("moved", "a b c")
    # the reader turns out to run elsewhere: it cannot map segments of this host's /dev/shm
    elsewhere = [
        msgspec.structs.replace(
            o, payloads={PAYLOAD_KEY: msgspec.structs.replace(o.payloads[PAYLOAD_KEY], host="gpu-7")}
        )
        for o in written
    ]
    last = chain.read("moved", elsewhere)

    assert last.error is None, last.error
    assert {k: last.params[k] for k in expected_digest("moved", 3)} == expected_digest("moved", 3)
    assert owned_segments(chain.writer) == []  # exported, then unlinked by the writer
    wait_for(lambda: chain.transfers(chain.reader).get("shm.fallback", {}).get("count") == 3, timeout=10,
             what="the reader's fallbacks")  # fmt: skip
    wait_for(lambda: chain.transfers(chain.writer).get("shm.export", {}).get("bytes") == 3 * PAYLOAD_BYTES,
             timeout=10, what="the writer's published exports")  # fmt: skip
    copies = [streams.payload(h.key) for h in handles(written)]
    wait_for(lambda: client.exists(*copies) == 0, timeout=10, what="the reader to free the exported copies")


def test_a_reader_whose_writer_is_gone_fails_that_request_clearly_and_keeps_serving(chain):
    chain.start("echo2", chain.reader)
    ghost = PayloadRef(connector="shm", key="omnistage_ghost_0", nbytes=10, dtype="uint8", shape=[10],
                       host="gpu-7", owner=unique("stopped-writer"))  # fmt: skip
    send_request(chain.client, chain.reader, StageRequest(request_id="orphan", stage_id=1, prompt="x",
                                                          payloads={PAYLOAD_KEY: ghost}))  # fmt: skip
    failed = finished_output(chain.client, chain.deployment, "orphan")
    assert failed.finish_reason == "error"
    assert "stayed on host 'gpu-7'" in failed.error.message and ghost.owner in failed.error.message

    send_request(chain.client, chain.reader, StageRequest(request_id="next", stage_id=1, prompt="still here"))
    assert finished_output(chain.client, chain.deployment, "next").finish_reason == "stop"


def test_a_writer_releases_segments_nobody_will_read(chain):
    chain.start("echo2", chain.reader)
    chain.start("echo", chain.writer, payload_bytes=PAYLOAD_BYTES)
    written = chain.write("cancelled", "a b")
    assert len(owned_segments(chain.writer)) == 2

    release = Release(keys=[h.key for h in handles(written)])
    chain.client.xadd(streams.replica_input(chain.writer), {"kind": "release", "data": encode(release)})

    wait_for(lambda: owned_segments(chain.writer) == [], timeout=10, what="the writer to release its segments")
