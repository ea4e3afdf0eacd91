"""Shared helpers for the diffusion tests: tiny checkpoints built once per session, and a
driver that feeds requests to an engine at given steps and collects every output."""

from __future__ import annotations

from pathlib import Path

import torch

from stages.diffusion_knobs import diffusion_knobs
from stages.protocol import RequestOptions, StageOutput, StageRequest

torch.set_num_threads(2)


def tiny_model(tmp_path_factory, name: str) -> Path:
    """The tiny checkpoint `name` (stages.tiny), built once per test session."""
    from stages.tiny import build_all

    root = tmp_path_factory.getbasetemp() / "diffusion_models"
    return build_all(root, only=[name])[name]


def load_pipe(model_dir: Path):
    from diffusers import DiffusionPipeline

    pipe = DiffusionPipeline.from_pretrained(str(model_dir))
    pipe.set_progress_bar_config(disable=True)
    return pipe


def request(request_id: str, prompt: str, **knobs) -> StageRequest:
    """A request with these diffusion knobs, converted and checked as at the edge (output np by default)."""
    knobs.setdefault("output_format", "np")
    return StageRequest(request_id=request_id, prompt=prompt, options=options(**knobs))


def options(**knobs) -> RequestOptions:
    return RequestOptions(diffusion=diffusion_knobs(knobs))


def drive(engine, arrivals: dict[int, list[StageRequest]], max_steps: int = 500) -> dict[str, list[StageOutput]]:
    """Step `engine`, adding the requests of `arrivals[k]` before step k; every output by request id."""
    outputs: dict[str, list[StageOutput]] = {}
    step = 0
    while step <= max(arrivals, default=0) or engine.has_unfinished():
        for stage_request in arrivals.get(step, []):
            engine.add_request(stage_request)
        for output in engine.step():
            outputs.setdefault(output.request_id, []).append(output)
        step += 1
        assert step < max_steps, "the engine did not finish"
    return outputs


def final(outputs: list[StageOutput]) -> StageOutput:
    finished = [o for o in outputs if o.finished]
    assert len(finished) == 1, f"expected one finished output, got {len(finished)}"
    assert finished[0] is outputs[-1]
    return finished[0]
