"""Qwen2.5-Omni token2wav as a window decoder: codec codes -> mel (DiT, flow-matching ODE) -> 24 kHz audio.

Dataflow of `Qwen2_5OmniToken2WavModel.forward` (= `generate(return_audio=True)`'s last step):
the DiT integrates an ODE (RK4, `num_steps=10` time points with sway -1.0, classifier-free
guidance 0.5 with the uncond batch stacked) from Gaussian noise `[1, 2T, 80]` (two mel frames
per code) conditioned on the speaker's `cond` and `ref_mel` (spk_dict.pt); BigVGAN turns the
mel into 240 samples per mel frame (480 per code).

Noise: each request draws `[1, 2 * max_length, 80]` once from its own generator seeded with
the request's `seed` (default 0). CPU `torch.randn` fills a prefix-consistent stream, so the
first 2T rows equal `torch.manual_seed(seed); torch.randn([1, 2T, 80])`, which is what HF draws.

Whole sequence (async chunk off, or all codes in before the first chunk): identical to HF.
Chunks: the DiT's attention sees one 24-frame block ahead/behind per layer, but the ODE's
~36 function evaluations spread that to the whole sequence, so no finite context makes a
chunk exact. A chunk [s, e) is decoded from codes [a, e + lookahead) with a = s - left_context
rounded down to a DiT block (so block boundaries align with the whole decode) and the noise
rows of exactly those positions; its audio is the window's samples for [s, e). The difference
from the whole decode is bounded in tests/stages/omni/test_omni_streaming.py.

One window decode is ~36 DiT evaluations plus BigVGAN: tens of thousands of small kernels, so
on a GPU it is bound by launching them. With `cuda_graphs` (on by default on CUDA) the ODE of
each window shape (batch, codes) is captured in a CUDA graph the first time it is decoded (that
decode also pays for the capture), sharing one memory pool, and replayed from then on;
`max_graphs` bounds how many shapes are kept (least recently used first out). Batches above
`max_graph_batch` (4) run eagerly: there the arithmetic dominates and a graph gains nothing.
The ODE loop has no host syncs (transformers' `RungeKutta4ODESolver` steps, without its
interpolation checks), and the speaker encoder (ECAPA, which syncs) runs once per decode before
it, so eager and captured decodes compute the same thing. BigVGAN stays eager (it ends on the CPU).
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from contextlib import contextmanager
from typing import Any

import numpy as np

from stages.errors import InvalidRequest
from stages.generation.engine import Window
from stages.protocol import StageRequest

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MEL_SAMPLES = 240
DEFAULT_VOICE = "Chelsie"


class Token2WavDecoder:
    sample_rate = SAMPLE_RATE

    def __init__(
        self,
        module,
        speakers: dict[str, dict],
        *,
        device: str,
        max_frames: int,
        left_context: int = 48,
        lookahead: int = 12,
        num_steps: int = 10,
        guidance_scale: float = 0.5,
        sway: float = -1.0,
        cuda_graphs: bool = True,
        max_graphs: int = 128,
        max_graph_batch: int = 4,
    ):
        self.module = module
        self.dit = module.code2wav_dit_model
        self.bigvgan = module.code2wav_bigvgan_model
        self.speakers = {name.lower(): (name, value) for name, value in speakers.items()}
        self.device = device
        self.max_frames = max_frames
        self.repeats = self.dit.config.repeats
        self.block = self.dit.config.block_size // self.repeats
        self.left_context = left_context
        self.lookahead = lookahead
        self.num_steps, self.guidance_scale, self.sway = num_steps, guidance_scale, sway
        self.num_codes = self.dit.config.num_embeds
        self.graphs = (
            WindowGraphs(self._sample, max_graphs, max_graph_batch) if cuda_graphs and _is_cuda(device) else None
        )

    def open(self, request: StageRequest) -> Any:
        import torch

        voice = request.params.get("voice") or DEFAULT_VOICE
        if str(voice).lower() not in self.speakers:
            raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {sorted(self.speakers)}")
        speaker = self.speakers[str(voice).lower()][1]
        generator = torch.Generator().manual_seed(int(request.params.get("seed", 0)))
        noise = torch.randn([1, self.repeats * self.max_frames, self.dit.config.mel_dim], generator=generator)
        dtype = self.dit.dtype
        return {
            "cond": speaker["cond"].to(self.device, dtype),
            "ref_mel": speaker["ref_mel"].to(self.device, dtype),
            "noise": noise.to(self.device, dtype),
        }

    def frames_of(self, request: StageRequest) -> list[Any]:
        codes = list(request.prompt_token_ids or [])
        if any(not 0 <= code < self.num_codes for code in codes):
            raise InvalidRequest("codes", f"codec codes must lie in [0, {self.num_codes})")
        return codes

    def decode(self, windows: list[Window]) -> list[np.ndarray]:
        import torch

        spans = [self._span(window) for window in windows]
        codes = torch.tensor(
            [window.stream.frames[a:b] for window, (a, b) in zip(windows, spans, strict=False)], device=self.device
        )
        cond = torch.cat([window.stream.conditioning["cond"] for window in windows])
        ref_mel = torch.cat([window.stream.conditioning["ref_mel"] for window in windows])
        noise = torch.cat(
            [
                w.stream.conditioning["noise"][:, self.repeats * a : self.repeats * b]
                for w, (a, b) in zip(windows, spans, strict=False)
            ]
        )
        with torch.no_grad():
            speaker = self._speaker_features(ref_mel)
            sample = self.graphs.run if self.graphs is not None else self._sample
            mel = sample(cond, ref_mel, codes, noise, speaker)
            wavs = [
                self.bigvgan(mel[index : index + 1]).reshape(-1).float().cpu().numpy() for index in range(len(windows))
            ]
        per_code = self.repeats * MEL_SAMPLES
        results = []
        for window, (a, _), samples in zip(windows, spans, wavs, strict=False):
            begin = (window.start - a) * per_code
            end = samples.shape[-1] if window.final else (window.end - a) * per_code
            results.append(samples[begin:end])
        return results

    def _span(self, window: Window) -> tuple[int, int]:
        if window.start == 0 and window.final:
            return 0, window.end
        start = max(0, (window.start - self.left_context) // self.block * self.block)
        end = window.end if window.final else window.end + self.lookahead
        return start, end

    def _speaker_features(self, ref_mel):
        """What the DiT's speaker encoder makes of the reference mel at every ODE evaluation (with
        classifier-free guidance, the stacked conditioned and unconditioned halves)."""
        import torch

        encoder_input = ref_mel if self.guidance_scale < 1e-5 else torch.cat([ref_mel, torch.zeros_like(ref_mel)])
        return self.dit.input_embed.spk_encoder(encoder_input)

    def _sample(self, cond, ref_mel, codes, initial_state, speaker):
        """`Qwen2_5OmniToken2WavDiTModel.sample` with the initial noise and the speaker encoding given."""
        with _speaker_encoder_given(self.dit, speaker):
            return self._integrate(cond, ref_mel, codes, initial_state)

    def _integrate(self, cond, ref_mel, codes, initial_state):
        import torch
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import RungeKutta4ODESolver

        dit = self.dit
        duration = codes.shape[1] * self.repeats
        conditioning = cond.unsqueeze(1).repeat(1, duration, 1)
        guidance = self.guidance_scale

        def ode_function(time_step, hidden_states):
            if guidance < 1e-5:
                return dit(
                    hidden_states=hidden_states,
                    speaker_embedding=conditioning,
                    condition_vector=ref_mel,
                    quantized_code=codes,
                    time_step=time_step,
                    drop_audio_conditioning=False,
                    drop_code=False,
                    apply_cfg=False,
                )
            output = dit(
                hidden_states=hidden_states,
                quantized_code=codes,
                speaker_embedding=conditioning,
                condition_vector=ref_mel,
                time_step=time_step,
                apply_cfg=True,
            )
            guided, null = torch.chunk(output, 2, dim=0)
            return guided + (guided - null) * guidance

        times = torch.linspace(0, 1, self.num_steps, device=codes.device, dtype=conditioning.dtype)
        if self.sway is not None:
            times += self.sway * (torch.cos(torch.pi / 2 * times) - 1 + times)
        solver = RungeKutta4ODESolver(function=ode_function, initial_value=initial_state)
        value = initial_state
        for time_start, time_end in zip(times[:-1], times[1:], strict=True):
            # `integrate()` without its interpolation (the time points rise strictly, so each step ends
            # on the next one) and so without its host syncs; the last value is its last solution.
            delta, _ = solver._compute_step(ode_function, time_start, time_end - time_start, time_end, value)
            value = value + delta
        return value.permute(0, 2, 1)


class WindowGraphs:
    """CUDA graphs of `decode(*tensors) -> tensor`, one per shape of the inputs; a shape that fails to
    capture runs eagerly from then on."""

    def __init__(self, decode, max_graphs: int, max_batch: int):
        self.decode = decode
        self.max_graphs = max(1, max_graphs)
        self.max_batch = max_batch
        self.graphs: OrderedDict[tuple, tuple] = OrderedDict()
        self.pool = None
        self.uncapturable: set[tuple] = set()

    def run(self, *inputs):
        key = tuple((tuple(t.shape), t.dtype) for t in inputs)
        if key in self.uncapturable or inputs[0].shape[0] > self.max_batch:
            return self.decode(*inputs)
        entry = self.graphs.get(key)
        if entry is None:
            output = self._warm_up(inputs)
            try:
                self._capture(key, inputs)
            except Exception:
                logger.exception("capturing a token2wav window of shape %s failed; it runs eagerly", key)
                self.uncapturable.add(key)
            return output
        self.graphs.move_to_end(key)
        graph, static_inputs, static_output = entry
        for static, given in zip(static_inputs, inputs, strict=True):
            static.copy_(given)
        graph.replay()
        return static_output.clone()

    def _warm_up(self, inputs):
        """The first decode of a shape runs eagerly on a side stream (as capture requires) and is the result."""
        import torch

        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            output = self.decode(*inputs)
        torch.cuda.current_stream().wait_stream(stream)
        return output

    def _capture(self, key, inputs) -> None:
        import torch

        static_inputs = [t.clone() for t in inputs]
        graph = torch.cuda.CUDAGraph()
        # thread_local: the AR stages on other threads keep launching (and syncing) while this captures.
        with torch.cuda.graph(graph, pool=self.pool, capture_error_mode="thread_local"):
            static_output = self.decode(*static_inputs)
        self.pool = self.pool or graph.pool()
        self.graphs[key] = (graph, static_inputs, static_output)
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)


def _is_cuda(device) -> bool:
    return str(device).startswith("cuda")


@contextmanager
def _speaker_encoder_given(dit, features):
    """The DiT re-encodes the same reference mel (ECAPA) at every ODE evaluation; within one decode the
    input never changes, so the encoding computed once before (`_speaker_features`) stands in for it:
    same op on the same input, identical results, and nothing in the ODE that syncs with the host."""
    encoder = dit.input_embed.spk_encoder
    dit.input_embed.spk_encoder = _Given(features)
    try:
        yield
    finally:
        dit.input_embed.spk_encoder = encoder


def _given_module():
    import torch

    class Given(torch.nn.Module):
        def __init__(self, output):
            super().__init__()
            self.output = output

        def forward(self, hidden_states):
            return self.output

    return Given


def _Given(output):  # noqa: N802 - a class built on first use keeps torch out of this module's import
    return _given_module()(output)
