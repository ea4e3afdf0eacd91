"""The replica host: one process, one device, one StageEngine, fed by a Redis stream.

    python -m workers.replica_host --spec-json '<ReplicaSpec JSON>' --redis-url URL [--parent-pid N]

A spec naming a stage group's `members` starts a group host (`workers.group_host`) instead.

Its loop reads the replica's input stream through the replica consumer group, hands
requests, chunks and aborts to the engine, steps the engine while it has work, writes
every StageOutput to the deployment's output stream, and acknowledges each input entry
once processed. Status goes out as a heartbeat key and as inbox events (replica_status).

Payloads: large tensors of outputs leave through shared memory when their one reader, the
next stage, runs only on this host (`workers.payload_routes`), else through Redis keys with
a TTL; small ones inline. Shared-memory segments this host reads are freed once the input
that carried them is acknowledged; a segment written on another host is asked of its
writer (`workers.foreign_payloads`), and this host answers such `export` entries, and
`release` entries for segments nobody will read. Transfer totals, the stage's step measurements
(`workers.step_meter`) and its device's memory (`workers.device_usage`) go out with the heartbeat;
while it loads, the heartbeat names the loading phase and, while weights load, the bytes read of
their total.

Dead work: before taking a read's inputs, and every ENDED_CHECK_S while requests run, the
host asks which of their requests the orchestrator has ended (`streams.aborted_requests`):
their queued inputs are dropped unprocessed and their engine state is freed at once, not
when the abort entry queued behind them is reached. Dropped inputs (and redeliveries of
inputs already taken) are counted in the heartbeat's `dropped_inputs` and logged once per read.

Failure rules:
- Bad input (InvalidRequest / StageFailure from add_request or add_chunk, an undecodable
  entry) fails that request only, with an error output; the host keeps serving.
- A `step()` exception that names a request (`error.request_id`), or that happens while
  only one request is running, fails that request only. Any other `step()` exception
  means the engine's state is unknown: every running request gets an error output, the
  host reports ERROR and exits 1, and the control plane restarts it (with backoff).
- A load failure reports ERROR (the exception's last line) and exits 1; a configuration error
  (`PERMANENT_LOAD_ERRORS`) is reported `permanent`, and the control plane does not retry it.
- Drain (entry or SIGTERM): new requests are refused with an error output (code
  "replica_draining") while chunks and aborts of running requests still apply; once no
  request runs, the host reports STOPPED and exits 0. After OMNISTAGE_DRAIN_TIMEOUT s
  (default 120) the requests still running fail instead.
- When the worker whose pid is --parent-pid exits, running requests fail, the host reports
  ERROR and exits 3.
- Cut off from Redis longer than its heartbeat lease (a partition: `stages.heartbeat`), the host
  finds its heartbeat key expired when Redis is back: the control plane has re-routed or failed
  its requests meanwhile, so it drops them unanswered, reports ERROR and exits 1 (and is
  restarted), rather than serve on as a replica the control plane gave up.

Exit codes: 0 drained (or another live host already serves this replica), 1 failed, 3 parent gone.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

import msgspec
import redis

from stages import streams
from stages.connectors import Connectors
from stages.engine import StageEngine
from stages.engine_stats import capacity_of, clear_step_stats, step_stats, unit_of
from stages.errors import ConfigError, StageFailure
from stages.orchestrator.replica_streams import StageStream, stepping_on
from stages.protocol import Abort, Drain, Export, Release, ReplicaSpec, StageError, StageOutput, StageRequest, encode
from stages.replica_stats import StageStats
from workers.device_pinning import local_device
from workers.device_usage import DeviceReader
from workers.dropped_inputs import AbortedRequests, DroppedInputs
from workers.foreign_payloads import ForeignPayloads
from workers.log_stream import publish_logs
from workers.parent_watch import PARENT_GONE_EXIT_CODE, ParentWatch
from workers.payload_routes import PayloadRoutes
from workers.replica_input import BadEntry, InputEntry, ReplicaInput
from workers.replica_status import StatusReporter, heartbeat_interval_s, heartbeat_ttl_s
from workers.request_spans import RequestSpans
from workers.seen_entries import SeenEntries
from workers.step_meter import StepMeter

log = logging.getLogger("workers.replica_host")

EXIT_OK = 0
EXIT_FAILED = 1
PERMANENT_LOAD_ERRORS = (ConfigError, FileNotFoundError, NotADirectoryError, json.JSONDecodeError)
"""Load failures that fail the same way on every attempt."""
IDLE_WAIT_MS = 250
"""How long a read waits for input when the engine has nothing to do (bounds the reaction to a stop)."""
MAX_CHUNK_WAIT_MS = 50
"""Longest wait for input while requests wait for chunks (the wait doubles from 1 ms while no output comes)."""
REDIS_RETRY_S = 0.5
ENDED_CHECK_S = 0.5
"""How often the host asks whether requests it runs were ended by the orchestrator."""


@dataclass
class _Running:
    stage_id: int
    next_seq: int = 0


class _Fatal(Exception):
    """The engine is in an unknown state: the host must stop."""


def drain_timeout_s() -> float:
    return float(os.environ.get("OMNISTAGE_DRAIN_TIMEOUT", "120"))


def last_line(error: BaseException) -> str:
    return traceback.format_exception_only(type(error), error)[-1].strip()


class ReplicaHost:
    def __init__(
        self,
        spec: ReplicaSpec,
        client: redis.Redis,
        *,
        build_engine: Callable[[ReplicaSpec], StageEngine] | None = None,
        parent_pid: int | None = None,
        drains_after_ms: int | None = None,
    ):
        self.spec = spec
        self.client = client
        self.build_engine = build_engine or (
            lambda spec: _load_engine(spec, self.reporter.set_progress, self.reporter.set_weights)
        )
        self.drains_after_ms = drains_after_ms
        self.input = ReplicaInput(client, spec.replica_id)
        self.output_stream = streams.deployment_output(spec.deployment_id)
        self.running: dict[str, _Running] = {}
        host = socket.gethostname()
        self.connectors = Connectors(
            redis_client=client,
            redis_consume=False,
            shm_consume=False,
            host=host,
            owner=spec.replica_id,
            fetch_foreign=ForeignPayloads(client).fetch,
        )
        self.routes = PayloadRoutes(client, spec, host)
        self.aborted = AbortedRequests(client)
        self.dropped = DroppedInputs(spec.replica_id)
        self.spans = RequestSpans(spec, host)
        self._last_ended_check = 0.0
        self.connector_preference = spec.stage_deploy.connector
        self.reporter = StatusReporter(
            client,
            spec,
            queue_depth=self.input.depth,
            running=lambda: len(self.running),
            transfers=self.connectors.stats,
            dropped_inputs=lambda: self.dropped.total,
            stats=self._stage_stats,
            device_usage=lambda: self.device_reader.latest,
        )
        self.seen = SeenEntries()
        self.meter = StepMeter()
        named = spec.device or spec.stage_deploy.device
        self.device = local_device(named, os.environ)
        """The replica's device as this process names it (`cuda:0` in a host pinned to its GPU)."""
        self.device_reader = DeviceReader(self.device, named, heartbeat_interval_s(), driver=not spec.members)
        self.engine: StageEngine | None = None
        self.stop_requested = threading.Event()
        self.watch = ParentWatch(parent_pid, on_timeout=self._report_parent_gone) if parent_pid else None
        self.draining_since: float | None = None
        self._outbox: list[StageOutput] = []
        self._unacked: list[InputEntry] = []
        self._idle_steps = 0

    # ------------------------------------------------------------------ lifecycle

    def run(self) -> int:
        owner = self.reporter.claim()
        if owner is not None:
            log.warning("replica %s is already served by %s: not starting", self.spec.replica_id, owner)
            return EXIT_OK
        if self.drains_after_ms is None:
            seconds, micros = self.client.time()
            self.drains_after_ms = seconds * 1000 + micros // 1000
        self.reporter.start()
        if self.watch is not None:
            self.watch.start()
        try:
            return self._load_and_serve()
        finally:
            if self.watch is not None:
                self.watch.stop()
            self.reporter.stop()

    def _stage_stats(self) -> StageStats | None:
        return self.meter.snapshot(capacity_of(self.engine)) if self.engine is not None else None

    def _load_and_serve(self) -> int:
        with stepping_on(confined_stream(self.spec, self.device)):
            return self._load_and_serve_here()

    def _load_and_serve_here(self) -> int:
        try:
            self.reporter.set_progress(0.0, "starting")
            self.engine = self.build_engine(self.spec)
            self.meter.set_unit(unit_of(self.engine))
        except Exception as error:
            log.exception("replica %s: loading the engine failed", self.spec.replica_id)
            self.reporter.set_state("ERROR", error=f"loading failed: {last_line(error)}",
                                    permanent=isinstance(error, PERMANENT_LOAD_ERRORS))  # fmt: skip
            return EXIT_FAILED
        try:
            self.input.ensure_group()
            claimed = self.input.claim_from_dead_consumers(stale_after_ms=int(heartbeat_ttl_s() * 1000))
            self.reporter.set_state("READY", progress=1.0)
            return self._serve(claimed)
        except _Fatal as fatal:
            self.reporter.set_state("ERROR", error=str(fatal))
            return EXIT_FAILED
        finally:
            self._shutdown_engine()

    def _shutdown_engine(self) -> None:
        try:
            self.engine.shutdown()
        except Exception:
            log.exception("replica %s: engine shutdown failed", self.spec.replica_id)

    # ------------------------------------------------------------------ the loop

    def _serve(self, claimed: list[InputEntry]) -> int:
        if claimed:
            log.info("replica %s: took over %d pending entries", self.spec.replica_id, len(claimed))
        backlog = claimed
        while True:
            if self.watch is not None and self.watch.gone.is_set():
                return self._abandon(f"the worker process {self.watch.parent_pid} hosting this replica exited")
            if self.reporter.lease_lost:
                return self._fenced()
            if self.stop_requested.is_set() and self.draining_since is None:
                self._begin_drain("stop signal")
            try:
                entries = backlog or self.input.read(block_ms=self._wait_ms())
                backlog = []
                self._take(entries)
                self._drop_ended_running()
                if self.engine.has_unfinished():
                    self._step()
                else:
                    self._idle_steps = 0
                self._flush()
                self.device_reader.refresh()  # between steps: no CUDA graph is being captured now
            except (redis.ConnectionError, redis.TimeoutError) as failure:
                log.warning("replica %s: Redis unavailable (%s); retrying", self.spec.replica_id, failure)
                time.sleep(REDIS_RETRY_S)
                continue
            if self.draining_since is not None and self._drained():
                return EXIT_OK

    def _wait_ms(self) -> int | None:
        if not self.engine.has_unfinished():
            return IDLE_WAIT_MS
        if self._idle_steps == 0:
            return None  # outputs are flowing: look for input without waiting
        return min(MAX_CHUNK_WAIT_MS, 1 << min(self._idle_steps, 6))

    def _take(self, entries: list[InputEntry]) -> None:
        requested = {entry.message.request_id for entry in entries if isinstance(entry.message, StageRequest)}
        for request_id in self.aborted.among(sorted(requested)):
            self._abort(request_id)  # its inputs below are then dropped as inputs of a closed request
        for entry in entries:
            self._apply(entry)
            self._unacked.append(entry)
        self.dropped.log_batch()

    def _drop_ended_running(self) -> None:
        """Free the engine state of running requests the orchestrator ended (failed elsewhere,
        cancelled, timed out) without waiting for their abort entries."""
        now = time.monotonic()
        if not self.running or now - self._last_ended_check < ENDED_CHECK_S:
            return
        self._last_ended_check = now
        for request_id in self.aborted.among(sorted(self.running)):
            log.info(
                "replica %s: request %s was ended by the orchestrator; freeing it", self.spec.replica_id, request_id
            )
            self._abort(request_id)

    def _apply(self, entry: InputEntry) -> None:
        message = entry.message
        if isinstance(message, StageRequest):
            if message.seq == 0:
                self.meter.queued(time.time() - entry.time_ms / 1000)
            self._take_request(message)
        elif isinstance(message, Abort):
            self._abort(message.request_id)
        elif isinstance(message, Export):
            self.connectors.export_segments(message.payloads)
        elif isinstance(message, Release):
            self.connectors.free_segments(message.keys)
        elif isinstance(message, Drain):
            if entry.time_ms < self.drains_after_ms:
                log.info("replica %s: ignoring a drain sent before this host started", self.spec.replica_id)
            elif self.draining_since is None:
                self._begin_drain("drain entry")
        elif isinstance(message, BadEntry):
            log.warning("replica %s: bad input entry %s: %s", self.spec.replica_id, entry.entry_id, message.reason)
            if message.request_id is not None:
                error = StageError(message=message.reason, type="invalid_request_error", param="data")
                self._fail(message.request_id, message.stage_id, error)

    def _take_request(self, request: StageRequest) -> None:
        request_id = request.request_id
        if not self.seen.first_time(request_id, request.seq):
            self.dropped.add(request_id)  # a redelivery, or an input of a request that ended
            return
        try:
            request = self.connectors.load_request(request)
            if request.seq == 0:
                self._start_request(request)
            elif request_id in self.running:
                self.engine.add_chunk(request)
            else:
                message = (
                    f"request {request_id!r} is not running on replica {self.spec.replica_id!r} (lost by a restart)"
                )
                self._fail(request_id, request.stage_id, StageError(message=message, code="request_lost"))
        except StageFailure as failure:
            error = StageError(message=failure.message, type=failure.error_type, param=failure.param)
            self._fail(request_id, request.stage_id, error)
        except Exception as exception:  # an engine bug on one request's input fails that request only
            log.exception("replica %s: request %s: input failed", self.spec.replica_id, request_id)
            self._fail(request_id, request.stage_id, StageError(message=last_line(exception)))

    def _start_request(self, request: StageRequest) -> None:
        if self.draining_since is not None:
            message = f"replica {self.spec.replica_id!r} is draining and takes no new requests"
            self._fail(request.request_id, request.stage_id, StageError(message=message, code="replica_draining"))
            return
        self.engine.add_request(request)
        self.running[request.request_id] = _Running(stage_id=request.stage_id)
        self.spans.started(request)

    def _abort(self, request_id: str) -> None:
        self.spans.ended(request_id, "aborted")
        self.seen.close(request_id)
        self.running.pop(request_id, None)
        self.engine.abort(request_id)

    def _step(self) -> None:
        clear_step_stats(self.engine)
        began = time.perf_counter()
        try:
            outputs = self.engine.step()
        except Exception as exception:
            self._step_failed(exception)
            return
        stats = step_stats(self.engine, outputs)
        if stats.batch or outputs:  # a step that only waited for input chunks is no step
            self.meter.step(time.perf_counter() - began, stats.batch, stats.units)
        for output in outputs:
            running = self.running.get(output.request_id)
            ended = running is not None and self._ended(output)
            self.spans.output(output, ended=ended)
            if running is not None:
                running.next_seq = max(running.next_seq, output.seq + 1)
                if ended:
                    del self.running[output.request_id]
        self._outbox += outputs
        self._idle_steps = 0 if outputs or stats.batch else self._idle_steps + 1  # a step that ran a piece is work

    def _ended(self, output: StageOutput) -> bool:
        """Whether the request is done on this host once `output` is out."""
        return output.finished

    def _step_failed(self, exception: Exception) -> None:
        culprit = getattr(exception, "request_id", None)
        if culprit is None and len(self.running) == 1:
            culprit = next(iter(self.running))
        message = f"the engine failed a step: {last_line(exception)}"
        if culprit in self.running:
            log.exception("replica %s: request %s failed a step", self.spec.replica_id, culprit)
            self._fail(culprit, self.running[culprit].stage_id, StageError(message=message))
            return
        log.exception("replica %s: a step failed and no single request caused it", self.spec.replica_id)
        self._fail_all(StageError(message=message, code="replica_failed"))
        raise _Fatal(message)

    def _fail(self, request_id: str, stage_id: int, error: StageError) -> None:
        """End one request with an error output (numbered after its last output)."""
        self.spans.ended(request_id, error.message)
        self.seen.close(request_id)
        running = self.running.pop(request_id, None)
        if running is not None:
            stage_id = running.stage_id
            try:
                self.engine.abort(request_id)
            except Exception:
                log.exception("replica %s: aborting failed request %s", self.spec.replica_id, request_id)
        output = StageOutput(
            request_id=request_id,
            stage_id=stage_id,
            seq=running.next_seq if running else 0,
            finished=True,
            finish_reason="error",
            error=error,
        )
        self._outbox.append(output)

    def _fail_all(self, error: StageError) -> None:
        for request_id, running in list(self.running.items()):
            self._fail(request_id, running.stage_id, error)
        self._flush_quietly()

    def _flush(self) -> None:
        """Publish the outputs, then acknowledge the inputs they came from, in one round trip
        (commands run in order: an input is acknowledged only after its outputs are out)."""
        if not self._outbox and not self._unacked:
            return
        self._outbox = [self._offload(output) for output in self._outbox]  # once, even if this flush is retried
        pipe = self.client.pipeline(transaction=False)
        for output in self._outbox:
            pipe.xadd(self.output_stream, {"replica": self.spec.replica_id, "data": encode(output)})
        if self._unacked:
            self.input.queue_done(pipe, self._unacked)
        for result in pipe.execute(raise_on_error=False):
            if isinstance(result, redis.ResponseError) and "NOGROUP" not in str(result):
                raise result  # NOGROUP: Redis lost the stream meanwhile, nothing left to acknowledge
            if isinstance(result, redis.ConnectionError | redis.TimeoutError):
                raise result
        acknowledged, self._outbox, self._unacked = self._unacked, [], []
        self._free_inputs(acknowledged)

    def _offload(self, output: StageOutput) -> StageOutput:
        return self.connectors.offload_output(
            output, same_host=self.routes.stays_on_host, preference=self.connector_preference
        )

    def _free_inputs(self, entries: list[InputEntry]) -> None:
        """Acknowledged inputs are never delivered again: the shared memory they carried can go."""
        try:
            for entry in entries:
                if isinstance(entry.message, StageRequest):
                    self.connectors.free_request(entry.message)
        except redis.RedisError as failure:  # an exported copy then expires with its TTL
            log.warning("replica %s: freeing input payloads failed: %s", self.spec.replica_id, failure)

    def _flush_quietly(self) -> None:
        try:
            self._flush()
        except redis.RedisError as failure:
            log.error("replica %s: could not publish final outputs: %s", self.spec.replica_id, failure)

    # ------------------------------------------------------------------ stopping

    def _begin_drain(self, why: str) -> None:
        log.info("replica %s: draining (%s), %d requests running", self.spec.replica_id, why, len(self.running))
        self.draining_since = time.monotonic()
        self.reporter.set_state("DRAINING")

    def _drained(self) -> bool:
        if self.running and time.monotonic() - self.draining_since > drain_timeout_s():
            message = f"replica {self.spec.replica_id!r} stopped before the request finished (drain timeout)"
            self._fail_all(StageError(message=message, code="drain_timeout"))
        if self.running or self.engine.has_unfinished():
            return False
        self._flush_quietly()
        self.reporter.set_state("STOPPED")
        return True

    def _abandon(self, reason: str) -> int:
        self._fail_all(StageError(message=f"replica {self.spec.replica_id!r} stopped: {reason}", code="replica_lost"))
        self.reporter.set_state("ERROR", error=reason)
        return PARENT_GONE_EXIT_CODE

    def _fenced(self) -> int:
        """Cut off from Redis longer than its lease: the orchestrator re-routed or failed its requests
        and the reconciler scheduled a restart; stop serving (their outputs would be stale)."""
        reason = "cut off from Redis for longer than its heartbeat lease; restarting"
        log.warning("replica %s: %s (%d requests dropped)", self.spec.replica_id, reason, len(self.running))
        for request_id in list(self.running):
            self._abort(request_id)
        self._outbox = []
        self.reporter.set_state("ERROR", error=reason)
        return EXIT_FAILED

    def _report_parent_gone(self) -> None:
        """Called by the parent watch when the loop could not stop in time (loading, or a step hangs)."""
        self.reporter.set_state(
            "ERROR", error=f"the worker process {self.watch.parent_pid} hosting this replica exited"
        )
        self.reporter.stop()


def confined_stream(spec: ReplicaSpec, device: str) -> StageStream | None:
    """The stream a single stage confined to a share of its GPU's SMs (`gpu_sms`) steps on; None: the
    default stream, as for every other stage (a group's members get streams of their own: workers.group_chain)."""
    sms = spec.stage_deploy.gpu_sms
    if spec.members or sms is None or not device.startswith("cuda"):
        return None
    return StageStream(device, sms=sms)


def _load_engine(
    spec: ReplicaSpec,
    progress: Callable[[float, str], None] | None = None,
    weights: Callable[[int, int], None] | None = None,
) -> StageEngine:
    from workers.replica_engine import load_replica_engine  # heavy: imports the family's modules

    return load_replica_engine(spec, progress=progress, weights=weights)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m workers.replica_host", description=__doc__.split("\n")[0])
    parser.add_argument("--spec-json", required=True, help="the ReplicaSpec as JSON")
    parser.add_argument("--redis-url", required=True)
    parser.add_argument("--parent-pid", type=int, default=None, help="exit when this process (the worker) exits")
    parser.add_argument(
        "--drains-after-ms",
        type=int,
        default=None,
        help="ignore drain entries Redis took before this time (ms; default: when the host starts)",
    )
    return parser.parse_args(argv)


def log_at_debug(names: str) -> None:
    """Each logger of the comma list `names` logs at DEBUG, whatever the root level
    (`OMNISTAGE_DEBUG_LOGGERS`, e.g. `stages.generation` for every code2wav decode)."""
    for name in filter(None, (name.strip() for name in names.split(","))):
        logging.getLogger(name).setLevel(logging.DEBUG)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        spec = msgspec.json.decode(args.spec_json, type=ReplicaSpec)
    except (msgspec.DecodeError, msgspec.ValidationError) as error:
        print(f"replica host: invalid --spec-json: {error}", file=sys.stderr)
        return 2
    logging.basicConfig(
        level=os.environ.get("OMNISTAGE_LOG_LEVEL", "INFO"),
        format=f"%(asctime)s %(levelname)s [replica {spec.replica_id} pid {os.getpid()}] %(name)s: %(message)s",
    )
    log_at_debug(os.environ.get("OMNISTAGE_DEBUG_LOGGERS", ""))
    client = redis.Redis.from_url(args.redis_url, socket_timeout=10, socket_connect_timeout=5)
    publish_logs(client, spec.replica_id)  # the console's logs tail
    host_class = ReplicaHost
    if spec.members:
        from workers.group_host import GroupHost  # a stage group: several stages in this process

        host_class = GroupHost
    host = host_class(spec, client, parent_pid=args.parent_pid, drains_after_ms=args.drains_after_ms)
    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, lambda *_: host.stop_requested.set())
    code = host.run()
    log.info("replica %s: exiting with code %d", spec.replica_id, code)
    return code


if __name__ == "__main__":
    sys.exit(main())
