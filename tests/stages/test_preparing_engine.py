"""The entry stage's input processing runs off the step loop: a slow prompt does not stall the
other requests' steps, a prompt that fails to prepare fails alone, and order is kept."""

from __future__ import annotations

import threading

from stages.engine import StageEngine
from stages.errors import InvalidRequest
from stages.models.preparing_engine import PreparingEngine
from stages.protocol import StageOutput, StageRequest


class Recording(StageEngine):
    """Emits one output per step for each request, until it has `steps` outputs."""

    def __init__(self, log: list[str], steps: int = 3):
        self.log, self.steps = log, steps
        self.running: dict[str, list[str]] = {}

    def add_request(self, request: StageRequest) -> None:
        if request.prompt == "too long for the engine":
            raise InvalidRequest("messages", "longer than the context")
        self.running[request.request_id] = [request.prompt or ""]

    def add_chunk(self, request: StageRequest) -> None:
        self.running[request.request_id].append(request.prompt or "")

    def step(self) -> list[StageOutput]:
        outputs = []
        for request_id, texts in list(self.running.items()):
            texts.append("step")
            done = len([t for t in texts if t == "step"]) >= self.steps
            self.log.append(f"output {request_id}")
            outputs.append(StageOutput(request_id=request_id, text="|".join(texts), finished=done))
            if done:
                del self.running[request_id]
        return outputs

    def abort(self, request_id: str) -> None:
        self.running.pop(request_id, None)

    def has_unfinished(self) -> bool:
        return bool(self.running)


class Family:
    """prepare_request upper-cases the prompt; "slow" waits for the test, "broken" raises."""

    def __init__(self, log: list[str]):
        self.log = log
        self.release = threading.Event()

    def prepare_request(self, request, model_dir, stage_deploy):
        if request.prompt == "slow":
            self.release.wait(5)
            self.log.append(f"prepared {request.request_id}")
        if request.prompt == "broken":
            raise ValueError("the template raised")
        prompt = request.prompt if request.prompt == "too long for the engine" else request.prompt.upper()
        return StageRequest(request_id=request.request_id, prompt=prompt, finished=request.finished)


def engine_with(steps: int = 3):
    log: list[str] = []
    family = Family(log)
    return PreparingEngine(Recording(log, steps), family, "model", None), family, log


def run_until_idle(engine: PreparingEngine, limit: int = 400) -> list[StageOutput]:
    outputs = []
    for _ in range(limit):
        if not engine.has_unfinished():
            break
        outputs += engine.step()
    return outputs


def test_a_slow_preparation_does_not_stall_the_other_requests_steps():
    engine, family, log = engine_with(steps=3)
    engine.add_request(StageRequest(request_id="fast", prompt="hello"))
    engine.add_request(StageRequest(request_id="slow", prompt="slow"))
    for _ in range(50):
        engine.step()
        if log.count("output fast") == 3:
            break
    assert log.count("output fast") == 3 and "prepared slow" not in log
    family.release.set()
    outputs = run_until_idle(engine)
    assert [o.text for o in outputs if o.request_id == "slow"][-1] == "SLOW|step|step|step"
    engine.shutdown()


def test_a_prompt_that_fails_to_prepare_fails_alone_with_an_error_output():
    engine, family, _ = engine_with(steps=2)
    family.release.set()
    for request_id, prompt in (("ok", "fine"), ("bad", "broken"), ("long", "too long for the engine")):
        engine.add_request(StageRequest(request_id=request_id, stage_id=1, prompt=prompt))
    outputs = run_until_idle(engine)
    by_id = {o.request_id: o for o in outputs}
    bad, long = by_id["bad"], by_id["long"]
    assert bad.finished and bad.finish_reason == "error" and bad.stage_id == 1
    assert bad.error.type == "invalid_request_error" and "the template raised" in bad.error.message
    assert long.finish_reason == "error" and "longer than the context" in long.error.message
    assert by_id["ok"].finished and by_id["ok"].error is None and by_id["ok"].text == "FINE|step|step"
    engine.shutdown()


def test_chunks_of_a_request_still_preparing_follow_it_and_an_abort_drops_it():
    engine, family, _ = engine_with(steps=1)
    engine.add_request(StageRequest(request_id="streamed", prompt="slow", finished=False))
    engine.add_chunk(StageRequest(request_id="streamed", seq=1, prompt="more"))
    engine.add_request(StageRequest(request_id="dropped", prompt="slow"))
    engine.abort("dropped")
    family.release.set()
    outputs = run_until_idle(engine)
    assert [o.request_id for o in outputs] == ["streamed"]
    assert outputs[0].text == "SLOW|more|step"
    engine.shutdown()
