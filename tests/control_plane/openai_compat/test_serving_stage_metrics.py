"""Per-stage series on /metrics after real requests through every stage kind: the tiny Qwen2.5-Omni
(AR thinker, AR talker, generation code2wav) with audio out, and a tiny SD3 (diffusion). Read
with prometheus_client's own text parser: replica states, stage queues, steps, batch sizes,
units per stage kind, cache and slot use, per-stage first outputs, the audio RTF, and the
memory of the replicas and of the device they run on."""

from __future__ import annotations

import time

import httpx
import pytest
from procs import METRICS_TOKEN, wait_for
from prometheus_client.parser import text_string_to_metric_families
from tiny_checkpoints import tiny_checkpoint

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True), pytest.mark.timeout(1200)]

OMNI = {"stages": {"thinker": {"sampling": {"max_tokens": 6}}, "talker": {"sampling": {"max_tokens": 24}}}}
OMNI_STAGES = {"thinker": "tokens", "talker": "tokens", "code2wav": "frames"}


@pytest.fixture(scope="session")
def tiny_sd3():
    return tiny_checkpoint("sd3")


def scrape(stack) -> dict[str, list]:
    """Sample name -> [(labels, value)] of the whole exposition."""
    response = httpx.get(f"{stack.base}/metrics", headers={"Authorization": f"Bearer {METRICS_TOKEN}"}, timeout=30)
    assert response.status_code == 200, response.text
    samples: dict[str, list] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples.setdefault(sample.name, []).append((sample.labels, sample.value))
    return samples


def value(samples: dict, name: str, **labels) -> float:
    """The one sample of `name` whose labels include `labels` (0 when there is none)."""
    found = [v for sample_labels, v in samples.get(name, []) if labels.items() <= sample_labels.items()]
    assert len(found) <= 1, (name, labels, found)
    return found[0] if found else 0.0


def settled_scrape(stack) -> dict[str, list]:
    """A scrape whose stage step counts no later heartbeat changes (two scrapes 1.5 s apart, three
    heartbeats at the stacks' 0.5 s, agree): the requests before it are counted whole, not midway."""
    previous = scrape(stack)

    def settled() -> dict | None:
        nonlocal previous
        time.sleep(1.5)
        current = scrape(stack)
        same = current.get("omnistage_stage_step_seconds_count") == previous.get("omnistage_stage_step_seconds_count")
        previous = current
        return current if same else None

    return wait_for(settled, timeout=60, interval=0, what="the replicas' heartbeats to settle")


def test_stage_series_have_values_after_requests_through_each_stage_kind(serving_stack, tiny_omni, tiny_sd3):
    serving_stack.deploy("omni-metrics", "qwen2_5_omni", model_dir=str(tiny_omni), deploy_config=OMNI)
    serving_stack.deploy("image-metrics", "text_to_image", model_dir=str(tiny_sd3))
    serving_stack.wait_running("omni-metrics", "image-metrics", timeout=600)
    before = settled_scrape(serving_stack)  # the warm-up requests, wholly counted by the replicas

    client = serving_stack.client(timeout=300)
    reply = client.chat.completions.create(
        model="omni-metrics",
        modalities=["text", "audio"],
        audio={"voice": "Chelsie", "format": "wav"},
        messages=[{"role": "user", "content": "Hello there"}],
        max_tokens=6,
    )
    assert reply.choices[0].message.audio.data
    image = client.images.generate(model="image-metrics", prompt="a red square", size="32x32",
                                   extra_body={"num_inference_steps": 3})  # fmt: skip
    assert image.data[0].b64_json
    serving_stack.history_written()

    def stepped() -> dict | None:
        """A settled scrape once every stage's heartbeat counted the requests' steps and waits."""
        samples = settled_scrape(serving_stack)
        stages = [("omni-metrics", stage) for stage in OMNI_STAGES] + [("image-metrics", "dit")]
        grew = all(
            value(samples, "omnistage_stage_step_seconds_count", deployment=d, stage=s)
            > value(before, "omnistage_stage_step_seconds_count", deployment=d, stage=s)
            and value(samples, "omnistage_stage_queue_seconds_count", deployment=d, stage=s) >= 2
            for d, s in stages
        )
        return samples if grew else None

    samples = wait_for(stepped, timeout=60, interval=0.5, what="the requests' steps on /metrics")

    for deployment, stage, unit in [("omni-metrics", s, u) for s, u in OMNI_STAGES.items()] + [
        ("image-metrics", "dit", "steps")
    ]:
        where = {"deployment": deployment, "stage": stage, "replica": "0"}
        assert value(samples, "omnistage_replica_state", **where, state="RUNNING") == 1.0
        assert value(samples, "omnistage_replica_state", **where, state="ERROR") == 0.0
        assert value(samples, "omnistage_stage_queue_depth", **where) >= 0
        assert value(samples, "omnistage_stage_queue_seconds_count", **where) >= 2  # warm-up and ours
        assert value(samples, "omnistage_stage_step_seconds_sum", **where) > 0
        assert value(samples, "omnistage_stage_batch_size_count", **where) > 0
        produced = value(samples, "omnistage_stage_output_units_total", **where, unit=unit)
        assert produced > value(before, "omnistage_stage_output_units_total", **where, unit=unit), (stage, unit)
        assert value(samples, "omnistage_replica_memory_bytes", **where, device="cpu") > 0
        assert value(samples, "omnistage_stage_first_output_seconds_count", deployment=deployment, stage=stage) >= 1
    kinds = {stage: kind for stage, kind in (("thinker", "kv_blocks"), ("talker", "kv_blocks"), ("code2wav", "slots"))}
    for stage, kind in kinds.items():
        assert value(samples, "omnistage_stage_capacity_total", deployment="omni-metrics", stage=stage, kind=kind) > 0
    assert value(samples, "omnistage_stage_capacity_total", deployment="image-metrics", kind="slots") > 0
    # at least 3 denoising steps for our image on top of the warm-up's
    dit = {"deployment": "image-metrics", "stage": "dit", "unit": "steps"}
    assert (
        value(samples, "omnistage_stage_output_units_total", **dit)
        >= value(before, "omnistage_stage_output_units_total", **dit) + 3
    )

    rtf = value(samples, "omnistage_audio_real_time_factor_count", deployment="omni-metrics", route="chat.completions")
    assert rtf == 1 and value(samples, "omnistage_audio_real_time_factor_sum", deployment="omni-metrics") > 0
    assert value(samples, "omnistage_audio_real_time_factor_count", deployment="image-metrics") == 0
    assert value(samples, "omnistage_queue_seconds_count", deployment="omni-metrics") == 1
    assert value(samples, "omnistage_queue_seconds_count", deployment="image-metrics", route="images.generations") == 1

    devices = [labels for labels, v in samples["omnistage_device_memory_total_bytes"] if v > 0]
    assert any(labels["device"] == "cpu" and labels["host"] for labels in devices), devices
    used = [v for labels, v in samples["omnistage_device_memory_used_bytes"] if labels["device"] == "cpu"]
    assert used and used[0] > 0
    assert any(labels["device"] == "cpu" for labels, _ in samples.get("omnistage_device_utilization_ratio", []))
