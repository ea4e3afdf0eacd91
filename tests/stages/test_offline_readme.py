"""The README's offline example, run as written in a fresh interpreter: it prints an answer and
the process exits cleanly (no abort from threads left running at exit). The same with the
tiny Qwen2.5-Omni and every default: the talker may outrun code2wav, whose backlog drains in
bounded decodes instead of one that outlasts the hop timeout."""

from __future__ import annotations

import re
import subprocess

import pytest
from procs import PYTHON, REPO
from smollm2_checkpoint import smollm2_checkpoint
from tiny_checkpoints import tiny_checkpoint


def readme_offline_snippet() -> str:
    readme = (REPO / "README.md").read_text()
    snippets = [s for s in re.findall(r"```python\n(.*?)```", readme, re.S) if "from stages import Omni" in s]
    assert snippets, "the README has no offline example"
    return snippets[0]


def run_snippet(code: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run([PYTHON, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=timeout)


def test_the_readme_offline_example_runs_as_written():
    smollm2_checkpoint()  # what the snippet opens, built where `make run` builds it
    assert smollm2_checkpoint().relative_to(REPO).as_posix() in readme_offline_snippet()
    done = run_snippet(readme_offline_snippet(), timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip()
    assert "terminate called" not in done.stderr


@pytest.mark.slow
def test_the_omni_offline_example_with_defaults_speaks_and_exits_cleanly():
    tiny_checkpoint("qwen2_5_omni")
    code = (
        "from stages import Omni\n"
        "result = Omni('var/models/qwen2_5_omni').generate('Hello')[0]\n"
        "print(result.audio.size, result.sample_rate)\n"
    )
    done = run_snippet(code, timeout=900)
    assert done.returncode == 0, done.stderr[-3000:]
    samples, rate = done.stdout.split()[-2:]
    assert int(samples) > 0 and int(rate) == 24000
    assert "terminate called" not in done.stderr and "Traceback" not in done.stderr
