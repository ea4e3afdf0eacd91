"""Qwen2.5-Omni token2wav as a window decoder: codec codes -> mel (DiT, flow-matching ODE) -> 24 kHz audio.

Dataflow of `Qwen2_5OmniToken2WavModel.forward` (= `generate(return_audio=True)`'s last step):
the DiT integrates an ODE (RK4, `num_steps=10` time points with sway -1.0, classifier-free
guidance 0.5 with the uncond batch stacked) from Gaussian noise `[1, 2T, 80]` (two mel frames
per code) conditioned on the speaker's `cond` and `ref_mel` (spk_dict.pt, or a custom voice's conditioning
sent with the request); BigVGAN turns the
mel into 240 samples per mel frame (480 per code).

Noise: each request draws `[1, 2 * max_length, 80]` once from its own generator seeded with
the request's `options.diffusion.seed` (default 0). CPU `torch.randn` fills a prefix-consistent
stream, so the first 2T rows equal `torch.manual_seed(seed); torch.randn([1, 2T, 80])`, which is
what HF draws.

Whole sequence (async chunk off, or all codes in before the first chunk): identical to HF.
Chunks: the DiT's attention sees one 24-frame block ahead/behind per layer, but the ODE's
~36 function evaluations spread that to the whole sequence, so no finite context makes a
chunk exact. A chunk [s, e) is decoded from codes [a, e + lookahead) with a = s - left_context
rounded down to a DiT block (so block boundaries align with the whole decode) and the noise
rows of exactly those positions; its audio is the window's samples for [s, e). The difference
from the whole decode is bounded in tests/stages/omni/test_omni_streaming.py.

One window decode is ~36 DiT evaluations plus BigVGAN: tens of thousands of small kernels, so
on a GPU it is bound by launching them. With `cuda_graphs` (on by default on CUDA) one DiT
evaluation is captured in a CUDA graph per window span length and batch bucket (1, 2, 4, 8, then
every 16 up to the stage's `max_batch`), sharing one memory pool, and replayed for each of the
ODE's evaluations; a batch of n windows replays the smallest bucket >= n, its rows padded with
copies of the first window's (their output is dropped). `warm_up` captures every bucket of the
span lengths the engine's window policy makes (its planned windows) when the stage is built, so
no request pays a capture; a shape first seen mid-stream (a final window, an early one) is
captured then (one eager evaluation and one captured: 0.1-0.2 s on an H200), and `max_graphs`
bounds how many shapes are kept (least recently used first out). Windows of one span length and
one voice's reference length batch whatever their starts (`batch_key`): the decode of a window
depends only on its codes, noise rows and voice. The ODE loop has no host syncs (transformers'
`RungeKutta4ODESolver` steps, without its interpolation checks), and the speaker encoder (ECAPA,
which syncs) runs once per decode before it, so eager and captured decodes compute the same thing.
BigVGAN stays eager (it ends on the CPU) and runs once per batch of windows: its convolutions
and anti-aliased activations treat the rows independently, and one batched pass launches the
kernels (and syncs with the host) once instead of once per window. It decodes each window's mel
with VOCODER_REACH_MEL frames around it (what its output samples depend on), not the whole span:
the DiT's left context of 48 codes is 96 mel frames, BigVGAN's reach 28.

Pieces: `begin` decodes a batch one RK4 step (four evaluations) per piece, then BigVGAN, so the
engine can run a more urgent batch's pieces between them (stages/generation/engine.py). A piece
copies its window's tensors into the graph's static buffers before its replays (another batch of
the same shape may have replayed that graph in between), and on CUDA returns once the piece queued
before it has run (`PiecePacer`), so the device runs next what the engine chose next.

Precision: float32 by default, as transformers runs it (the family's builder, on CUDA, turns on
`dit_autocast` and `compile_blocks` unless their options say otherwise). `dit_autocast` / `vocoder_autocast`
("bfloat16") run the DiT's / BigVGAN's matmuls and convolutions under autocast with the weights
kept as loaded (benchmarks/token2wav_windows.py measures speed and the difference from float32).
`compile_blocks` (option `token2wav_compile`) fuses each DiT block's small kernels with
torch.compile (`compile_dit_blocks`); the CUDA graphs then capture the compiled kernels.
`block_attention` (option `token2wav_block_attention`) computes the DiT's attention block by block,
without masks (stages/generation/block_attention.py).
`compile_vocoder` (option `token2wav_vocoder_compile`) runs each of BigVGAN's anti-aliased
activations as two compiled kernels (stages/generation/anti_aliased_activation.py).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any

import numpy as np

from stages.errors import ConfigError, InvalidRequest
from stages.generation.anti_aliased_activation import fuse_activations, unfuse_activations
from stages.generation.block_attention import use_block_attention
from stages.generation.engine import CodeStream, Window
from stages.protocol import StageRequest
from stages.sm_partition import capture_stream

logger = logging.getLogger(__name__)

SAMPLE_RATE = 24000
MEL_SAMPLES = 240
DEFAULT_VOICE = "Chelsie"
DIT_RECOMPILE_LIMIT = 16
"""Compiled graphs of the DiT block's forward in one process: look-ahead/look-behind pairs x precisions."""
VOCODER_REACH_MEL = 28
"""Mel frames on either side of an output sample that Qwen2.5-Omni's BigVGAN reads (conv_pre of 7,
upsampling by (5, 3, 2, 2, 2, 2) with kernels (11, 7, 4, 4, 4, 4), AMP blocks of kernels (3, 7, 11) and
dilations (1, 3, 5), anti-aliased activations): a mel frame this far from a window leaves the window's
samples unchanged (tests/stages/omni/test_vocoder_reach.py). BigVGAN decodes a window with this
much mel around it, not the DiT's whole left context."""
VOCODER_SHAPE = {
    "upsample_rates": [5, 3, 2, 2, 2, 2],
    "upsample_kernel_sizes": [11, 7, 4, 4, 4, 4],
    "resblock_kernel_sizes": [3, 7, 11],
    "resblock_dilation_sizes": [[1, 3, 5], [1, 3, 5], [1, 3, 5]],
}
"""The BigVGAN configuration VOCODER_REACH_MEL was derived for; another one is given its whole span."""


def vocoder_reach(config) -> int | None:
    """VOCODER_REACH_MEL for the BigVGAN it was derived for, else None (decode whole spans)."""
    shape = {name: [list(v) if isinstance(v, list | tuple) else v for v in getattr(config, name, [])]
             for name in VOCODER_SHAPE}  # fmt: skip
    return VOCODER_REACH_MEL if shape == VOCODER_SHAPE else None


class Token2WavDecoder:
    sample_rate = SAMPLE_RATE
    seconds_per_frame = 2 * MEL_SAMPLES / SAMPLE_RATE

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
        max_batch: int = 16,
        dit_autocast: str | None = None,
        vocoder_autocast: str | None = None,
        compile_blocks: bool = False,
        compile_vocoder: bool = False,
        block_attention: bool = False,
    ):
        self.module = module
        self.dit = module.code2wav_dit_model
        self.bigvgan = module.code2wav_bigvgan_model
        self.speakers = {name.lower(): (name, value) for name, value in speakers.items()}
        self.device = device
        self.max_frames = max_frames
        self.repeats = self.dit.config.repeats
        self.seconds_per_frame = self.repeats * MEL_SAMPLES / SAMPLE_RATE
        self.block = self.dit.config.block_size // self.repeats
        self.left_context = left_context
        self.lookahead = lookahead
        self.num_steps, self.guidance_scale, self.sway = num_steps, guidance_scale, sway
        self.num_codes = self.dit.config.num_embeds
        self.dit_autocast = _autocast_dtype(dit_autocast, "token2wav_dit_autocast")
        self.vocoder_autocast = _autocast_dtype(vocoder_autocast, "token2wav_vocoder_autocast")
        self.compiled_blocks = _switch(compile_blocks, "token2wav_compile")
        if self.compiled_blocks:
            compile_dit_blocks(self.dit)
        self.compiled_vocoder = _switch(compile_vocoder, "token2wav_vocoder_compile")
        if self.compiled_vocoder:
            fuse_activations(self.bigvgan)
        if _switch(block_attention, "token2wav_block_attention"):
            use_block_attention(self.dit)
        self.graphs = (
            EvaluationGraphs(self._ode_function, max_graphs, max_batch) if cuda_graphs and _is_cuda(device) else None
        )
        self.pacer = PiecePacer(_is_cuda(device))
        self.vocoder_reach = vocoder_reach(self.bigvgan.config)

    @property
    def align(self) -> int:
        """Codes per DiT attention block: window ends on these keep steady spans of one length."""
        return self.block

    def batch_key(self, window: Window) -> tuple[int, int]:
        start, end = self._span(window)
        return end - start, window.stream.conditioning["ref_mel"].shape[1]

    def warm_up(self, windows: list[tuple[int, int]], max_batch: int) -> None:
        """Capture the graphs of every batch bucket up to `max_batch` for each span length of these
        (non-final) windows, by decoding them once; nothing to do without graphs."""
        if self.graphs is None:
            return
        began = time.perf_counter()
        stream = CodeStream("warm-up", self.open(StageRequest(request_id="warm-up")), [0] * self.max_frames)
        by_span = {}
        for start, end in windows:
            window = Window(stream, start, end, final=False)
            by_span.setdefault(self.batch_key(window), window)
        for window in by_span.values():
            for size in self.graphs.sizes:
                if size <= max_batch:
                    self.decode([window] * size)
        logger.info(
            "token2wav: %d span length(s) x batch %s warmed up in %.1f s",
            len(by_span),
            self.graphs.sizes,
            time.perf_counter() - began,
        )

    def open(self, request: StageRequest) -> Any:
        import torch

        cond, ref_mel = self.speaker_of(request)
        generator = torch.Generator().manual_seed(request.options.diffusion.seed or 0)
        noise = torch.randn([1, self.repeats * self.max_frames, self.dit.config.mel_dim], generator=generator)
        dtype = self.dit.dtype
        return {
            "cond": cond.to(self.device, dtype),
            "ref_mel": ref_mel.to(self.device, dtype),
            "noise": noise.to(self.device, dtype),
        }

    def speaker_of(self, request: StageRequest) -> tuple[Any, Any]:
        """(cond, ref_mel) of the request's voice: a custom voice's conditioning when it carries one
        (stages/voice_conditioning.py), else the named built-in speaker's (the API checked the name;
        the offline library's requests are refused here when it names none of them)."""
        from stages.tensors import from_wire
        from stages.voice_conditioning import conditioning_of

        custom = conditioning_of(request.params)
        if custom is not None:
            return from_wire(custom.cond), from_wire(custom.ref_mel)
        voice = request.options.voice or DEFAULT_VOICE
        if str(voice).lower() not in self.speakers:
            raise InvalidRequest("voice", f"unknown voice {voice!r}; this model has {sorted(self.speakers)}")
        speaker = self.speakers[str(voice).lower()][1]
        return speaker["cond"], speaker["ref_mel"]

    def frames_of(self, request: StageRequest) -> list[Any]:
        codes = list(request.prompt_token_ids or [])
        if any(not 0 <= code < self.num_codes for code in codes):
            raise InvalidRequest("codes", f"codec codes must lie in [0, {self.num_codes})")
        return codes

    def decode(self, windows: list[Window]) -> list[np.ndarray]:
        """Audio samples for each window: all of `begin`'s pieces at once."""
        for audio in self.begin(windows):
            if audio is not None:
                return audio
        raise AssertionError("a window decode ended without audio")

    def begin(self, windows: list[Window]) -> Iterator[list[np.ndarray] | None]:
        """The decode of a batch of windows in pieces: each `next()` runs one RK4 step of the ODE (four
        DiT evaluations) and yields None; the last runs BigVGAN and yields each window's audio. The
        engine interleaves the pieces of several batches, so a newcomer's first window does not wait
        for a whole batch of steady windows. On CUDA a piece returns once the piece before it (of
        any batch) has run: the device's queue stays about one piece deep, and what the engine runs
        next is what the device runs next."""
        import torch

        spans = [self._span(window) for window in windows]
        with torch.no_grad(), self._autocast(self.dit_autocast):
            ode = self._guarded(self._ode, windows, spans)
        for time_start, time_end in ode.intervals:
            with torch.no_grad(), self._autocast(self.dit_autocast):
                ode.value = ode.value + self._guarded(self._ode_step, ode, time_start, time_end)
            self.pacer.piece_queued()
            yield None
        first, last = self._vocoded_mel(windows, spans)
        with torch.no_grad(), self._autocast(self.vocoder_autocast):
            mel = ode.value.permute(0, 2, 1)[:, :, first:last]  # the ODE's state keeps the weights' dtype
            wavs = self._guarded(self.bigvgan, mel)
        audio = wavs.reshape(len(windows), -1).float().numpy()  # one batch, one copy
        yield self._audio(windows, spans, audio, first * MEL_SAMPLES)

    def _vocoded_mel(self, windows: list[Window], spans: list[tuple[int, int]]) -> tuple[int, int]:
        """The mel frames [first, last) of the batch's spans that BigVGAN decodes: each window's own
        frames and VOCODER_REACH_MEL around them, within the span (all of it for another BigVGAN)."""
        length = self.repeats * (spans[0][1] - spans[0][0])
        if self.vocoder_reach is None:
            return 0, length
        first, last = length, 0
        for window, (a, _) in zip(windows, spans, strict=False):
            first = min(first, max(0, self.repeats * (window.start - a) - self.vocoder_reach))
            last = max(last, min(length, self.repeats * (window.end - a) + self.vocoder_reach))
        return first, last

    def _audio(
        self, windows: list[Window], spans: list[tuple[int, int]], wavs: np.ndarray, offset: int = 0
    ) -> list[np.ndarray]:
        """Each window's samples out of its row of `wavs`, which begins `offset` samples into its span."""
        per_code = self.repeats * MEL_SAMPLES
        results = []
        for window, (a, _), samples in zip(windows, spans, wavs, strict=False):
            begin = (window.start - a) * per_code - offset
            end = samples.shape[-1] if window.final else (window.end - a) * per_code - offset
            results.append(samples[begin:end])
        return results

    def _guarded(self, compute, *args):
        """`compute(*args)`; if a compiled part (the DiT's blocks, BigVGAN's activations) fails in it (a
        compilation error), the decoder drops the compiled parts, logs why, and computes it again, and
        every later piece, uncompiled."""
        try:
            return compute(*args)
        except Exception:
            if not (self.compiled_blocks or self.compiled_vocoder):
                raise
            logger.exception("token2wav's compiled parts failed; running them uncompiled from now on")
            uncompile_dit_blocks(self.dit)
            unfuse_activations(self.bigvgan)
            self.compiled_blocks = self.compiled_vocoder = False
            if self.graphs is not None:
                self.graphs.retry_uncapturable()  # their capture may have failed on the compiled blocks
            return compute(*args)

    def _autocast(self, dtype):
        """Mixed precision for one part: its matmuls and convolutions in `dtype`, the weights, norms and
        the ODE's state as stored. Autocast is thread-local: the AR stages beside it are untouched."""
        import torch

        if dtype is None:
            return nullcontext()
        return torch.autocast(device_type=torch.device(self.device).type, dtype=dtype, cache_enabled=False)

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

    def _ode(self, windows: list[Window], spans: list[tuple[int, int]]) -> _OdeState:
        """`Qwen2_5OmniToken2WavDiTModel.sample`'s set-up with the initial noise given: the window's
        tensors, the speaker features, the time points of RK4."""
        import torch

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
        conditioning = cond.unsqueeze(1).repeat(1, codes.shape[1] * self.repeats, 1)
        times = torch.linspace(0, 1, self.num_steps, device=codes.device, dtype=conditioning.dtype)
        if self.sway is not None:
            times += self.sway * (torch.cos(torch.pi / 2 * times) - 1 + times)
        window = (conditioning, ref_mel, codes, self._speaker_features(ref_mel))
        if self.graphs is not None:
            function = self.graphs.bind(window, noise)
        else:
            function = lambda state: self._ode_function(*window)  # noqa: E731
        return _OdeState(function, noise, list(zip(times[:-1], times[1:], strict=True)))

    def _ode_step(self, ode: _OdeState, time_start, time_end):
        """One RK4 step's delta: `integrate()`'s step without its interpolation (the time points rise
        strictly, so each step ends on the next one) and so without its host syncs. The window's
        tensors go into the graph's static buffers at every step: another batch of the same shape may
        have replayed that graph in between."""
        from transformers.models.qwen2_5_omni.modeling_qwen2_5_omni import RungeKutta4ODESolver

        function = ode.function(ode.value)
        solver = RungeKutta4ODESolver(function=function, initial_value=ode.value)
        delta, _ = solver._compute_step(function, time_start, time_end - time_start, time_end, ode.value)
        return delta

    def _ode_function(self, conditioning, ref_mel, codes, speaker):
        """The ODE's right-hand side for one window: the DiT (with classifier-free guidance)."""
        import torch

        dit, guidance = self.dit, self.guidance_scale

        def evaluate(time_step, hidden_states):
            with _speaker_encoder_given(dit, speaker):
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

        return evaluate


@dataclass
class _OdeState:
    """One batch's ODE: `function(state)` gives the right-hand side to step `state` with (in the batch's
    CUDA graph, loaded with its windows, where there is one), `value` the state, `intervals` the RK4
    steps' (start, end) time points."""

    function: Callable[[Any], Callable]
    value: Any
    intervals: list


class PiecePacer:
    """Keeps a device's queue of decode pieces about one piece deep: after a piece is queued, the host
    waits for the piece queued before it. Without it the host queues a whole batch's ODE ahead of the
    device, and a piece of a more urgent batch queued next would still wait behind all of it."""

    def __init__(self, cuda: bool):
        self.cuda = cuda
        self.previous = None

    def piece_queued(self) -> None:
        if not self.cuda:
            return
        import torch

        event = torch.cuda.Event()
        event.record()
        if self.previous is not None:
            self.previous.synchronize()  # releases the GIL while it waits
        self.previous = event


class EvaluationGraphs:
    """CUDA graphs of one ODE evaluation (one DiT forward), one per window shape and batch bucket.

    A batch of n windows runs in the graph of the smallest bucket >= n (`sizes`: 1, 2, 4, 8, then
    every 16 up to `max_batch`; larger batches run eagerly): the window's tensors (conditioning,
    reference mel, codes, speaker features) are padded to the bucket once per decode (the padding
    rows hold the first window's) and copied into its static buffers before each piece, the state
    and time point once per evaluation, and the first n rows of the output are the batch's. The RK4
    arithmetic between evaluations stays eager (a few hundred small kernels per window). A new shape
    costs one eager evaluation (on a side stream, as capture requires) and one captured. A shape that
    fails to capture runs eagerly from then on. With `capture=False` the same padded static-buffer
    evaluation runs eagerly (on any device): the tests check the padding with it on CPU.
    """

    def __init__(self, ode_function, max_graphs: int, max_batch: int, capture: bool = True):
        from stages.ar.cuda_graphs import bucket_sizes

        self.ode_function = ode_function
        self.max_graphs = max(1, max_graphs)
        self.max_batch = max_batch
        self.sizes = bucket_sizes(max_batch)
        self.capture = capture
        self.graphs: OrderedDict[tuple, _Captured] = OrderedDict()
        self.pool = None
        self.uncapturable: set[tuple] = set()

    def bucket(self, count: int) -> int | None:
        """The padded batch a batch of `count` windows runs at (None: too large, eager)."""
        return next((size for size in self.sizes if size >= count), None)

    def bind(self, window: tuple, state) -> Callable[[Any], Callable]:
        """For one batch's decode, made once: its window tensors padded to its bucket, and a callable
        that, before each piece, takes the ODE's state, loads the batch into its graph's static buffers
        and returns the ODE's function `f(time_step, state) -> derivative`."""
        count = state.shape[0]
        size = self.bucket(count)
        key = (size, *((tuple(t.shape[1:]), t.dtype) for t in (*window, state)))
        if size is None:
            return lambda state: self.ode_function(*window)
        padded = [_pad_window_rows(t, count, size) for t in window]
        return lambda state: self._loaded(key, window, padded, state)

    def _loaded(self, key: tuple, window: tuple, padded: list, state):
        if key in self.uncapturable:
            return self.ode_function(*window)
        count = state.shape[0]
        captured = self.graphs.get(key)
        if captured is None:
            captured = self._capture(key, padded, _pad_rows(state, key[0]))
            if captured is None:
                return self.ode_function(*window)
        self.graphs.move_to_end(key)
        for static, given in zip(captured.window, padded, strict=True):
            static.copy_(given)
        captured.state[count:].copy_(state[:1].expand_as(captured.state[count:]))
        return lambda time_step, value: captured.evaluate(count, time_step, value)

    def retry_uncapturable(self) -> None:
        """Capture again, on their next decode, the shapes whose capture failed."""
        self.uncapturable.clear()

    def _capture(self, key, window, state):
        import torch

        began = time.perf_counter()
        static_window = [t.clone() for t in window]
        static_time, static_state = torch.zeros((), dtype=state.dtype, device=state.device), state.clone()
        function = self.ode_function(*static_window)
        if not self.capture:
            captured = _Captured(None, static_window, static_time, static_state, None, function)
            self.graphs[key] = captured
            return captured
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                function(static_time, static_state)  # lazy initialisations happen outside the capture
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            # thread_local: the AR stages on other threads keep launching (and syncing) while this captures.
            with torch.cuda.graph(graph, pool=self.pool, stream=capture_stream(), capture_error_mode="thread_local"):
                static_output = function(static_time, static_state)
        except Exception:
            logger.exception("capturing a token2wav evaluation of shape %s failed; it runs eagerly", key)
            self.uncapturable.add(key)
            return None
        self.pool = self.pool or graph.pool()
        captured = _Captured(graph, static_window, static_time, static_state, static_output)
        self.graphs[key] = captured
        while len(self.graphs) > self.max_graphs:
            self.graphs.popitem(last=False)
        logger.info(
            "token2wav: evaluation of %s codes (batch bucket %d) captured in %.3f s",
            tuple(window[2].shape),
            key[0],
            time.perf_counter() - began,
        )
        return captured


@dataclass
class _Captured:
    """One shape's graph and the static tensors it reads and writes (`eager`: the function that runs
    in place of the graph when nothing is captured)."""

    graph: Any
    window: list
    time_step: Any
    state: Any
    output: Any
    eager: Any = None

    def evaluate(self, count: int, time_step, state):
        self.time_step.copy_(time_step)
        self.state[:count].copy_(state)
        if self.graph is None:
            return self.eager(self.time_step, self.state)[:count].clone()
        self.graph.replay()
        return self.output[:count].clone()


def _pad_window_rows(tensor, count: int, size: int):
    """A window tensor of `count` rows padded to `size`; one of 2 x `count` rows (the speaker features of
    classifier-free guidance: conditioned rows, then unconditioned) padded half by half."""
    import torch

    if tensor.shape[0] == 2 * count:
        return torch.cat([_pad_rows(half, size) for half in tensor.chunk(2)])
    return _pad_rows(tensor, size)


def _pad_rows(tensor, size: int):
    """`tensor` with its first row repeated below it up to `size` rows."""
    import torch

    missing = size - tensor.shape[0]
    if missing == 0:
        return tensor
    return torch.cat([tensor, tensor[:1].expand(missing, *tensor.shape[1:])])


def compile_dit_blocks(dit) -> None:
    """Each DiT block's forward through `torch.compile`, with dynamic shapes: one evaluation is
    22 blocks of ~45 small kernels (norms, modulation, rotary slices, mask, gates), which Inductor
    fuses. The blocks run the same code on weights of the same shapes, so they share compiled
    graphs (modules are inlined, weights are graph inputs), one per look-ahead/look-behind pair
    (3 in the real config), and every window length and batch reuses them (`dynamic=True`), so a
    window shape first seen mid-stream is not recompiled; it is only captured (0.2-0.3 s on the
    H200, twice seen up to 0.9 s beside the AR stages)."""
    import torch

    config = torch._dynamo.config
    config.recompile_limit = max(config.recompile_limit, DIT_RECOMPILE_LIMIT)
    for block in dit.transformer_blocks:
        block.forward = torch.compile(block.forward, dynamic=True)


def uncompile_dit_blocks(dit) -> None:
    for block in dit.transformer_blocks:
        block.__dict__.pop("forward", None)  # the class's own forward again


def _autocast_dtype(name: str | None, option: str):
    import torch

    if name is None:
        return None
    if name != "bfloat16":
        raise ConfigError(f"options.{option}", f"must be bfloat16 or null, not {name!r}")
    return getattr(torch, name)


def _switch(value, option: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigError(f"options.{option}", f"must be true or false, got {value!r}")
    return value


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
