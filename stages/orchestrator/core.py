"""The orchestrator core: a pure state machine, `handle(event) -> list[Action]`.

No I/O, no clock, no threads: drivers (in-process asyncio, Redis streams) feed it events
and carry out its actions. It owns cross-stage request state:

- admission: at most `deploy.max_queue` requests in flight per deployment, and room in every
  stage a request needs (`admission.py`: 503 `overloaded` with a retry estimate);
- replica choice: the replica of the stage holding the fewest of our requests, near the
  request's upstream replicas, on the host running the fewest of the deployment's requests,
  least recently chosen on a tie; sticky per request and stage (a replica holds that
  request's KV cache);
- forwarding: each stage output goes along the pipeline's edges, chunk by chunk when
  the edge streams, else all at once when the source finished;
- order and de-duplication by (request, stage, seq): redelivered outputs are ignored,
  early ones wait for the gap to fill;
- cancellation to every replica holding the request; per-hop and per-request timeouts;
- completion when every client-visible stage finished;
- a replica that goes down: its requests restart on other replicas if nothing reached
  the client yet, else they fail;
- stage groups (`stages.groups`): a group's replica holds all its stages of a request; the
  core sends only into the group's entry stage and forwards nothing along the edges inside.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import msgspec

from stages.config import DeployConfig, PipelineConfig, StageConfig
from stages.groups import StageGroups
from stages.orchestrator.actions import Action, Complete, Emit, Fail, RequestSummary, SendAbort, SendToReplica
from stages.orchestrator.admission import StageSeconds, admission_refusal
from stages.orchestrator.discards import discard, output_handles, undelivered_handles
from stages.orchestrator.events import (
    Cancel,
    DeploymentDown,
    DeploymentUp,
    Event,
    InputChunk,
    ReplicaDown,
    ReplicaDraining,
    ReplicaUp,
    StageOutputEvent,
    Submit,
    Tick,
)
from stages.orchestrator.forwarding import build_stage_request, client_view, has_content
from stages.orchestrator.metrics import summarize
from stages.orchestrator.state import RequestState, StageProgress, parse_wire_id
from stages.orchestrator.wanted import unwanted_stages
from stages.protocol import SamplingParams, StageError, StageOutput, StageRequest
from stages.sampling_merge import merge_sampling


@dataclass
class Deployment:
    deployment_id: str
    pipeline: PipelineConfig
    deploy: DeployConfig

    def __post_init__(self) -> None:
        """Index the graph once: the core consults it on every output."""
        self.stage: dict[int, StageConfig] = {stage.id: stage for stage in self.pipeline.stages}
        self.downstream = {sid: self.pipeline.downstream(sid) for sid in self.stage}
        self.upstream_ids = {sid: [edge.source for edge in self.pipeline.upstream(sid)] for sid in self.stage}
        self.client_stage_ids = [stage.id for stage in self.pipeline.stages if stage.output is not None]
        self.entry_id = self.pipeline.entry_stage.id
        self.groups = StageGroups(self.pipeline, self.deploy)
        self.audio_stage_ids = [stage.id for stage in self.pipeline.stages if stage.output == "audio"]
        self.stage_seconds = StageSeconds()


@dataclass
class Replica:
    replica_id: str
    deployment_id: str
    stage: str
    host: str = ""
    """The machine it runs on (its heartbeat says); "" when unknown."""
    holding: set[str] = field(default_factory=set)
    """`<request_id>/<stage_id>` of the requests this orchestrator placed there and that still run."""
    draining: bool = False
    """It finishes what it holds but is chosen for nothing new."""
    chosen_at: int = 0
    """When the core last placed a request here (its placement counter): ties go to the least recent."""


class Orchestrator:
    def __init__(self, *, max_attempts: int = 2, remember_finished: int = 10_000):
        self.deployments: dict[str, Deployment] = {}
        self.replicas: dict[str, Replica] = {}
        self.requests: dict[str, RequestState] = {}
        self.max_attempts = max_attempts
        self._finished: OrderedDict[str, None] = OrderedDict()
        self._remember_finished = remember_finished
        self._changed: set[str] = set()
        self._removed: set[str] = set()
        self._placements = 0
        self._handlers = {
            DeploymentUp: self._deployment_up,
            DeploymentDown: self._deployment_down,
            ReplicaUp: self._replica_up,
            ReplicaDown: self._replica_down,
            ReplicaDraining: self._replica_draining,
            Submit: self._submit,
            InputChunk: self._input_chunk,
            StageOutputEvent: self._stage_output,
            Cancel: self._cancel,
            Tick: self._tick,
        }

    # ----------------------------------------------------------------- dispatch

    def handle(self, event: Event) -> list[Action]:
        return self._handlers[type(event)](event)

    # ----------------------------------------------------------- state access

    def take_changes(self) -> tuple[set[str], set[str]]:
        """Request ids whose state changed, and those that ended, since the last call."""
        changed, removed = self._changed - self._removed, set(self._removed)
        self._changed.clear()
        self._removed.clear()
        return changed, removed

    def restore(self, state: RequestState) -> None:
        """Adopt a request persisted by another (or an earlier) orchestrator. Its deployment
        must be known (DeploymentUp first); its replicas may announce themselves later."""
        if state.deployment_id not in self.deployments:
            raise KeyError(f"request {state.request_id} belongs to unknown deployment {state.deployment_id!r}")
        self.requests[state.request_id] = state
        for stage_id, progress in state.stages.items():
            replica = self.replicas.get(progress.replica_id or "")
            if replica is not None and progress.running:
                replica.holding.add(_holding_key(state.request_id, stage_id))

    def forget(self, request_id: str) -> None:
        """Drop a request from memory without any action (another orchestrator owns it now)."""
        state = self.requests.pop(request_id, None)
        if state is not None:
            self._release_all(state)

    def request_for(self, wire_id: str) -> str:
        return parse_wire_id(wire_id)[0]

    def in_flight(self, deployment_id: str) -> int:
        return sum(1 for state in self.requests.values() if state.deployment_id == deployment_id)

    # ------------------------------------------------------ deployments, replicas

    def _deployment_up(self, event: DeploymentUp) -> list[Action]:
        known = self.deployments.get(event.deployment_id)
        deployment = Deployment(event.deployment_id, event.pipeline, event.deploy)
        if known is not None:  # an edit: the stages' measured pace stays
            deployment.stage_seconds = known.stage_seconds
        self.deployments[event.deployment_id] = deployment
        return []

    def _deployment_down(self, event: DeploymentDown) -> list[Action]:
        actions: list[Action] = []
        for state in [s for s in self.requests.values() if s.deployment_id == event.deployment_id]:
            actions += self._fail(state, StageError(message=event.reason, code="deployment_stopped"), event.at)
        self.deployments.pop(event.deployment_id, None)
        for replica_id in [r.replica_id for r in self.replicas.values() if r.deployment_id == event.deployment_id]:
            del self.replicas[replica_id]
        return actions

    def _replica_up(self, event: ReplicaUp) -> list[Action]:
        if event.replica_id in self.replicas:
            return []  # a heartbeat of a replica we know: stages only wait when their stage had none
        replica = Replica(event.replica_id, event.deployment_id, event.stage, host=event.host)
        self.replicas[event.replica_id] = self._adopt_holdings(replica)
        actions: list[Action] = []
        for state in list(self.requests.values()):
            if state.deployment_id != event.deployment_id:
                continue
            for stage_id, progress in state.stages.items():
                if progress.name == event.stage and progress.replica_id is None and progress.outbox:
                    actions += self._place_and_flush(state, stage_id, event.at)
        return actions

    def _adopt_holdings(self, replica: Replica) -> Replica:
        """Requests restored from persisted state that run on a replica we only now hear of."""
        for state in self.requests.values():
            for stage_id, progress in state.stages.items():
                if progress.running and progress.replica_id == replica.replica_id:
                    replica.holding.add(_holding_key(state.request_id, stage_id))
        return replica

    def _replica_down(self, event: ReplicaDown) -> list[Action]:
        replica = self.replicas.pop(event.replica_id, None)
        if replica is None:
            return []
        actions: list[Action] = []
        for request_id in sorted({key.split("/")[0] for key in replica.holding}):
            state = self.requests.get(request_id)
            if state is None:
                continue
            if state.client_output_sent or state.attempt + 1 >= self.max_attempts:
                message = f"replica {event.replica_id} went down ({event.reason})"
                if state.client_output_sent:
                    message += " after part of the answer had reached the client"
                actions += self._fail(state, StageError(message=message, code="replica_down"), event.at)
            else:
                actions += self._reroute(state, event.at)
        return actions

    def _replica_draining(self, event: ReplicaDraining) -> list[Action]:
        replica = self.replicas.get(event.replica_id)
        if replica is not None:
            replica.draining = True
        return []

    def _choose_replica(self, deployment_id: str, stage: str, near: set[str] = frozenset()) -> Replica | None:
        """The least busy replica of `stage` that is not draining, among those on a host in `near`
        (the hosts of the request's upstream replicas) when there are any: payloads then stay in
        that host's shared memory instead of crossing to another host through Redis."""
        candidates = [
            r
            for r in self.replicas.values()
            if r.deployment_id == deployment_id and r.stage == stage and not r.draining
        ]
        if not candidates:
            return None
        host_load = self._host_load(deployment_id)
        return min(
            candidates,
            key=lambda replica: (
                replica.host not in near,
                len(replica.holding),
                host_load.get(replica.host, 0),
                replica.chosen_at,
                replica.replica_id,
            ),
        )

    def _host_load(self, deployment_id: str) -> dict[str, int]:
        """Requests of the deployment each host runs, any stage: an entry stage finishes early (a
        thinker's few tokens), so its own holdings alone would send every newcomer to one host,
        whose downstream replicas the request then stays near."""
        requests_on: dict[str, set[str]] = {}
        for replica in self.replicas.values():
            if replica.deployment_id == deployment_id:
                held = requests_on.setdefault(replica.host, set())
                held.update(key.split("/")[0] for key in replica.holding)
        return {host: len(requests) for host, requests in requests_on.items()}

    def _upstream_hosts(self, state: RequestState, stage_id: int) -> set[str]:
        """Hosts of the replicas that run the stages feeding `stage_id` for this request."""
        hosts = set()
        for source in self._deployment(state).upstream_ids.get(stage_id, []):
            progress = state.stages.get(source)
            replica = self.replicas.get(progress.replica_id or "") if progress is not None else None
            if replica is not None and replica.host:
                hosts.add(replica.host)
        return hosts

    # ---------------------------------------------------------------- requests

    def _submit(self, event: Submit) -> list[Action]:
        request_id = event.request.request_id
        if request_id in self.requests or request_id in self._finished:
            return []  # redelivered submit
        deployment = self.deployments.get(event.deployment_id)
        if deployment is None:
            error = StageError(message=f"unknown deployment {event.deployment_id!r}", code="unknown_deployment")
            return [Fail(request_id=request_id, reply_to=event.reply_to, error=error, summary=RequestSummary())]
        limit = deployment.deploy.max_queue
        if self.in_flight(event.deployment_id) >= limit:
            message = f"deployment {event.deployment_id} is at its limit of {limit} requests in flight (max_queue)"
            return [
                Fail(
                    request_id=request_id,
                    reply_to=event.reply_to,
                    error=StageError(message=message, code="queue_full"),
                    summary=RequestSummary(),
                )
            ]
        unwanted = unwanted_stages(deployment.pipeline, event.request.options.modalities)
        needed = [stage for stage in deployment.pipeline.stages if stage.id not in unwanted]
        in_flight = [state for state in self.requests.values() if state.deployment_id == event.deployment_id]
        refused = admission_refusal(deployment.deploy, needed, in_flight, deployment.stage_seconds)
        if refused is not None:
            return [Fail(request_id=request_id, reply_to=event.reply_to, error=refused, summary=RequestSummary())]
        state = RequestState(
            request_id=request_id,
            deployment_id=event.deployment_id,
            entry=event.request,
            sampling=event.sampling,
            reply_to=event.reply_to,
            submitted_at=event.at,
            stages={stage.id: StageProgress(name=stage.name) for stage in deployment.pipeline.stages},
            trace=event.request.trace,
        )
        for stage_id in unwanted:
            state.stages[stage_id].finished = True  # never sent anything: forwarding and completion pass it by
        self.requests[request_id] = state
        self._changed.add(request_id)
        return self._start_entry(state, event.at)

    def _start_entry(self, state: RequestState, at: float) -> list[Action]:
        entry_id = self._deployment(state).entry_id
        first = msgspec.structs.replace(
            state.entry, request_id=state.wire_id, stage_id=entry_id, seq=0, arrival_time=at, trace=state.stage_trace
        )
        actions = self._send(state, entry_id, first, at)
        for chunk in state.entry_chunks:
            actions += self._send_entry_chunk(state, entry_id, chunk, at)
        return actions

    def _input_chunk(self, event: InputChunk) -> list[Action]:
        state = self.requests.get(event.request_id)
        if state is None:
            return []
        state.entry_chunks.append(event.chunk)
        self._changed.add(state.request_id)
        return self._send_entry_chunk(state, self._deployment(state).entry_id, event.chunk, event.at)

    def _send_entry_chunk(self, state: RequestState, stage_id: int, chunk: StageRequest, at: float) -> list[Action]:
        progress = state.stages[stage_id]
        request = msgspec.structs.replace(chunk, request_id=state.wire_id, stage_id=stage_id, seq=progress.sent_seq)
        return self._send(state, stage_id, request, at)

    def _send(self, state: RequestState, stage_id: int, request: StageRequest, at: float) -> list[Action]:
        progress = state.stages[stage_id]
        if request.seq == 0:
            request = self._with_group_sampling(state, stage_id, request)
        self._changed.add(state.request_id)
        progress.sent_seq = request.seq + 1
        progress.last_activity = at
        if progress.replica_id is None:
            progress.outbox.append(request)
            if progress.waiting_since is None:
                progress.waiting_since = at
            return self._place_and_flush(state, stage_id, at)
        return [SendToReplica(replica_id=progress.replica_id, request=request)]

    def _place_and_flush(self, state: RequestState, stage_id: int, at: float) -> list[Action]:
        progress = state.stages[stage_id]
        replica = self._choose_replica(state.deployment_id, progress.name, self._upstream_hosts(state, stage_id))
        if replica is None:
            return []  # waits for a ReplicaUp, or times out
        replica.holding.add(_holding_key(state.request_id, stage_id))
        self._placements += 1
        replica.chosen_at = self._placements
        self._changed.add(state.request_id)
        progress.replica_id = replica.replica_id
        progress.started_at = at
        progress.waiting_since = None
        progress.last_activity = at
        outbox, progress.outbox = progress.outbox, []
        self._place_group_members(state, stage_id, replica, at)
        return [SendToReplica(replica_id=replica.replica_id, request=request) for request in outbox]

    # ------------------------------------------------------------------ groups

    def _with_group_sampling(self, state: RequestState, stage_id: int, request: StageRequest) -> StageRequest:
        graph = self._deployment(state)
        group = graph.groups.of(stage_id)
        if group is None or group.entry != stage_id:
            return request
        sampling = {}
        for member in group.members[1:]:
            stage = graph.stage[member]
            member_sampling = self._sampling_for(state, stage)
            if member_sampling is not None:
                sampling[stage.name] = member_sampling
        return msgspec.structs.replace(request, group_sampling=sampling)

    def _place_group_members(self, state: RequestState, stage_id: int, replica: Replica, at: float) -> None:
        """The other stages of the entry's group run the request on the same replica."""
        group = self._deployment(state).groups.of(stage_id)
        if group is None or group.entry != stage_id:
            return
        for member in group.members[1:]:
            progress = state.stages[member]
            if progress.finished or progress.replica_id is not None:
                continue
            progress.replica_id = replica.replica_id
            progress.started_at = progress.last_activity = at
            replica.holding.add(_holding_key(state.request_id, member))

    def _group_output(self, state: RequestState, stage_id: int, output: StageOutput, at: float) -> None:
        """Any output of a member shows the whole group alive; once every member that sends
        outputs back finished, the inner ones (which send none) are finished too."""
        group = self._deployment(state).groups.of(stage_id)
        if group is None:
            return
        members = [state.stages[member] for member in group.members]
        for progress in members:
            progress.last_activity = at
        if output.finished and all(state.stages[member].finished for member in group.published):
            for member in group.members:
                if not state.stages[member].finished:
                    self._finish_stage(state, member, output.finish_reason, at)

    # ------------------------------------------------------------------ outputs

    def _stage_output(self, event: StageOutputEvent) -> list[Action]:
        output = event.output
        request_id, attempt = parse_wire_id(output.request_id)
        state = self.requests.get(request_id)
        if state is None or attempt != state.attempt or output.stage_id not in state.stages:
            return discard(output_handles(output))  # late output of an ended request or an abandoned attempt
        progress = state.stages[output.stage_id]
        if event.replica_id is not None and progress.replica_id not in (None, event.replica_id):
            return []
        if progress.finished:
            return []
        if output.error is not None:
            # Errors end the request whatever their seq: a replica that fails a chunk or a
            # whole step cannot know which seq comes next.
            self._changed.add(request_id)
            if output.error.code == "replica_draining" and not state.client_output_sent:
                return self._refused_by_draining(state, progress.replica_id, event.at)
            return self._process(state, output.stage_id, output, event.at)
        if output.seq < progress.next_output_seq or output.seq in progress.early:
            return []  # a duplicate delivery
        progress.early[output.seq] = output
        self._changed.add(request_id)
        actions: list[Action] = []
        while progress.next_output_seq in progress.early and request_id in self.requests:
            ready = progress.early.pop(progress.next_output_seq)
            progress.next_output_seq += 1
            actions += self._process(state, output.stage_id, ready, event.at)
        return actions

    def _process(self, state: RequestState, stage_id: int, output: StageOutput, at: float) -> list[Action]:
        graph = self._deployment(state)
        stage = graph.stage[stage_id]
        progress = state.stages[stage_id]
        self._record(state, stage, progress, output, at)
        if stage_id == graph.entry_id and "num_prompt_tokens" in output.metrics:
            state.prompt_tokens = int(output.metrics["num_prompt_tokens"])
        if output.error is not None:
            return self._fail(state, _with_stage(output.error, stage.name), at)
        actions: list[Action] = []
        if stage.output is not None:
            view = client_view(output, state.request_id, stage.output)
            if has_content(view) or view.params or view.finished:  # progress events carry params only
                actions.append(Emit(request_id=state.request_id, reply_to=state.reply_to, output=view))
                state.client_output_sent = state.client_output_sent or has_content(view) or view.finished
        for edge in graph.downstream[stage_id]:
            if not graph.groups.internal(edge):
                actions += self._forward(state, graph, edge.source, edge.target, edge.streaming, output, at)
        if output.finished:
            self._finish_stage(state, stage_id, output.finish_reason, at)
        self._group_output(state, stage_id, output, at)
        if output.finished:
            if stage.output == "text" or (stage.output is not None and state.finish_reason is None):
                state.finish_reason = output.finish_reason
            if all(state.stages[sid].finished for sid in graph.client_stage_ids):
                actions += self._complete(state, at)
        return actions

    def _record(self, state: RequestState, stage: StageConfig, progress: StageProgress, output: StageOutput, at: float):
        progress.last_activity = at
        if has_content(output):
            progress.output_tokens += len(output.token_ids)
            progress.mark_output(at - state.submitted_at)
            if progress.first_output_at is None:
                progress.first_output_at = at
        if stage.output == "text" and (output.text or output.token_ids):
            state.first_text_at = state.first_text_at if state.first_text_at is not None else at
            state.last_text_at = at
            state.text_tokens += len(output.token_ids)
            state.text_outputs += 1
        if stage.output == "audio" and "audio" in output.payloads:
            if state.first_audio_at is None:
                state.first_audio_at = at
            state.audio_seconds += _audio_seconds(output)

    def _forward(
        self,
        state: RequestState,
        graph: Deployment,
        source: int,
        target: int,
        streaming: bool,
        output: StageOutput,
        at: float,
    ) -> list[Action]:
        receiver = state.stages[target]
        if receiver.finished:
            return []
        if output.finished and source not in receiver.sources_finished:
            receiver.sources_finished.append(source)
        all_sources_done = all(sid in receiver.sources_finished for sid in graph.upstream_ids[target])
        if streaming:
            if not has_content(output) and not output.finished:
                return []
            batch = [output]
        else:
            receiver.held.setdefault(source, []).append(output)
            if not output.finished:
                return []
            batch = receiver.held.pop(source)
        request = build_stage_request(
            wire_id=state.wire_id,
            source_stage=source,
            target_stage=target,
            seq=receiver.sent_seq,
            finished=all_sources_done,
            outputs=batch,
            sampling=self._sampling_for(state, graph.stage[target]),
            base_params=state.entry.params,
            options=state.entry.options,
            at=at,
            trace=state.stage_trace if receiver.sent_seq == 0 else "",  # the stage span starts with its first input
        )
        return self._send(state, target, request, at)

    def _sampling_for(self, state: RequestState, stage: StageConfig) -> SamplingParams | None:
        """The request's own sampling for the stage, else the pipeline's default with the
        deployment's override (`DeployConfig.stages[name].sampling`); None where neither sets
        any (the stage keeps its own defaults)."""
        if stage.name in state.sampling:
            return state.sampling[stage.name]
        deployment = self.deployments.get(state.deployment_id)
        override = deployment.deploy.sampling_override(stage) if deployment else {}
        if stage.default_sampling or override:
            return merge_sampling(stage.default_sampling, override)
        return None

    def _finish_stage(self, state: RequestState, stage_id: int, reason: str | None, at: float) -> None:
        progress = state.stages[stage_id]
        progress.finished = True
        progress.finish_reason = reason
        progress.finished_at = at
        progress.early = {}
        self._release(state.request_id, stage_id, progress)
        deployment = self.deployments.get(state.deployment_id)
        if deployment is not None and progress.started_at is not None:
            deployment.stage_seconds.observe(progress.name, at - progress.started_at)

    # ------------------------------------------------------- endings and control

    def _complete(self, state: RequestState, at: float) -> list[Action]:
        actions: list[Action] = self._abort_running(state) + discard(undelivered_handles(state))
        actions.append(
            Complete(
                request_id=state.request_id,
                reply_to=state.reply_to,
                summary=summarize(state, at),
                trace=state.trace,
                submitted_at=state.submitted_at,
            )
        )
        self._end(state)
        return actions

    def _fail(self, state: RequestState, error: StageError, at: float) -> list[Action]:
        actions: list[Action] = self._abort_running(state) + discard(undelivered_handles(state))
        state.finish_reason = (
            "abort" if error.type == "cancelled" else "timeout" if error.type == "timeout_error" else "error"
        )
        actions.append(
            Fail(
                request_id=state.request_id,
                reply_to=state.reply_to,
                error=error,
                summary=summarize(state, at),
                trace=state.trace,
                submitted_at=state.submitted_at,
            )
        )
        self._end(state)
        return actions

    def _abort_running(self, state: RequestState) -> list[Action]:
        holding = {
            progress.replica_id: None
            for progress in state.stages.values()
            if progress.running and progress.replica_id in self.replicas
        }  # one abort per replica: a group's replica holds several stages of the request
        self._release_all(state)
        return [SendAbort(replica_id=replica_id, request_id=state.wire_id) for replica_id in holding]

    def _end(self, state: RequestState) -> None:
        self.requests.pop(state.request_id, None)
        self._removed.add(state.request_id)
        self._finished[state.request_id] = None
        while len(self._finished) > self._remember_finished:
            self._finished.popitem(last=False)

    def _refused_by_draining(self, state: RequestState, replica_id: str | None, at: float) -> list[Action]:
        """A replica that began draining before the request reached it refused it without running it:
        it goes to another replica (or waits for one), as if it had never been placed."""
        replica = self.replicas.get(replica_id or "")
        if replica is not None:
            replica.draining = True
        return self._reroute(state, at)

    def _reroute(self, state: RequestState, at: float) -> list[Action]:
        actions: list[Action] = self._abort_running(state) + discard(undelivered_handles(state))
        state.attempt += 1
        state.stages = {stage_id: StageProgress(name=progress.name) for stage_id, progress in state.stages.items()}
        state.first_text_at = state.last_text_at = state.first_audio_at = None
        state.text_tokens = state.text_outputs = 0
        state.prompt_tokens = None
        self._changed.add(state.request_id)
        return actions + self._start_entry(state, at)

    def _cancel(self, event: Cancel) -> list[Action]:
        state = self.requests.get(event.request_id)
        if state is None:
            return []
        return self._fail(state, StageError(message=event.reason, type="cancelled", code="cancelled"), event.at)

    def _tick(self, event: Tick) -> list[Action]:
        actions: list[Action] = []
        for state in list(self.requests.values()):
            error = self._timeout_of(state, event.at)
            if error is not None:
                actions += self._fail(state, error, event.at)
        return actions

    def _timeout_of(self, state: RequestState, now: float) -> StageError | None:
        deploy = self.deployments[state.deployment_id].deploy
        if now - state.submitted_at > deploy.request_timeout_s:
            message = f"the request did not finish within request_timeout_s={deploy.request_timeout_s:g}s"
            return StageError(message=message, type="timeout_error", code="request_timeout")
        lag = _realtime_lag(state, self.deployments[state.deployment_id].audio_stage_ids, now)
        if deploy.max_realtime_lag_s is not None and lag > deploy.max_realtime_lag_s:
            message = (
                f"the audio fell {lag:.1f}s behind real time (max_realtime_lag_s={deploy.max_realtime_lag_s:g}s): "
                f"{state.audio_seconds:.1f}s of audio in {now - state.first_audio_at:.1f}s"
            )
            return StageError(message=message, type="timeout_error", code="behind_realtime")
        for progress in state.stages.values():
            if progress.waiting_since is not None and now - progress.waiting_since > deploy.hop_timeout_s:
                message = (
                    f"no replica of stage {progress.name!r} came up within hop_timeout_s={deploy.hop_timeout_s:g}s"
                )
                return StageError(message=message, type="timeout_error", code="no_replica")
            if progress.running and now - progress.last_activity > deploy.hop_timeout_s:
                message = (
                    f"stage {progress.name!r} on replica {progress.replica_id} made no progress for "
                    f"{now - progress.last_activity:.1f}s (hop_timeout_s={deploy.hop_timeout_s:g}s)"
                )
                return StageError(message=message, type="timeout_error", code="hop_timeout")
        return None

    # ------------------------------------------------------------------ helpers

    def _deployment(self, state: RequestState) -> Deployment:
        return self.deployments[state.deployment_id]

    def _release(self, request_id: str, stage_id: int, progress: StageProgress) -> None:
        replica = self.replicas.get(progress.replica_id or "")
        if replica is not None:
            replica.holding.discard(_holding_key(request_id, stage_id))

    def _release_all(self, state: RequestState) -> None:
        for stage_id, progress in state.stages.items():
            self._release(state.request_id, stage_id, progress)


def _holding_key(request_id: str, stage_id: int) -> str:
    return f"{request_id}/{stage_id}"


def _with_stage(error: StageError, stage_name: str) -> StageError:
    """Name the failing stage, except in input errors, whose message leads with the field."""
    if error.type == "invalid_request_error" or error.message.startswith(f"stage {stage_name!r}"):
        return error
    return msgspec.structs.replace(error, message=f"stage {stage_name!r}: {error.message}")


def _realtime_lag(state: RequestState, audio_stage_ids: list[int], now: float) -> float:
    """How far a listener who started playing at the first audio chunk waits behind real time:
    wall time since that chunk minus the seconds of audio produced (0 before any audio, and once
    the audio stages finished)."""
    if state.first_audio_at is None or all(state.stages[sid].finished for sid in audio_stage_ids):
        return 0.0
    return (now - state.first_audio_at) - state.audio_seconds


def _audio_seconds(output: StageOutput) -> float:
    """Seconds of audio in an output: samples (last axis of the payload) over its sample rate."""
    shape = output.payloads["audio"].shape
    sample_rate = output.params.get("sample_rate")
    if not shape or not sample_rate:
        return 0.0
    return shape[-1] / float(sample_rate)
