"""The Qwen3-Omni talker's code predictor as a small batched engine: the 15 residual codes of one frame
for every request in flight, in one loop per talker step.

transformers runs it through `code_predictor.generate(inputs_embeds=[last hidden, code-0 embedding],
max_new_tokens=15)`: a 2-position prefill, then 14 single-token steps, step g reading
`codec_embedding[g-1](code_g)` and sampling code g+1 from `lm_head[g]`. Here the same computation runs
on transformers' own predictor modules (`Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration`,
unmodified) with the project's paged attention (under a name of its own) and a cache of its own: one block of 16 positions
per batch row (row r owns block r + 1; block 0 is the null block), overwritten by every frame. The
prefill's two positions of a row run as two rows of one decode batch (each with its own mask), so
a frame is 15 forwards of the predictor's layers, each over the whole batch, and every shape in it
is static: on CUDA the whole loop, sampling included, is captured in one CUDA graph per bucketed
batch size (1, 2, 4, 8, 16, ... as the AR engine's decode graphs) and replayed once per talker step
(a size that fails to capture, logged, and every smaller one run the same loop eagerly). Each size
has two graphs: batches where every row is greedy run no sampling kernels at all. The loop is
bound by kernel launches, not arithmetic (15 forwards of a small model per frame), so `compile`
(the talker's `options.compile`) compiles the predictor's decoder layer as the AR engine does
(`stages/ar/compiled_layers.py`), fusing each layer's elementwise work into few kernels.

Sampling (the talker's `do_sample` decides, as in transformers: a greedy talker has a greedy
predictor): greedy is the argmax; sampled is transformers' warpers for the predictor (temperature 1,
top-k 50, then top-p 0.8) followed by a Gumbel-max draw, whose uniform noise is a hash of (the
request's seed, the frame's index in the request, the residual step, the candidate code), hashed
for every step and code once per frame (`gumbel_table`). A
request's residual codes therefore depend on its seed and its own history only, never on which other
requests share the batch or on a global RNG, and the draw needs no generator state inside the graph.
A request without a seed gets one from the talker engine (`draw_seed`).
"""

from __future__ import annotations

import contextlib
import logging
import random

import torch

from stages.ar.attention import AttentionBatch, paged_attention_modules, use_paged_attention
from stages.ar.compiled_layers import CompiledLayers
from stages.ar.cuda_graphs import bucket_sizes
from stages.ar.kv_cache import KVCacheShape, PagedKVCache
from stages.errors import ConfigError
from stages.sm_partition import capture_stream

logger = logging.getLogger(__name__)

TOP_K = 50
TOP_P = 0.8
ATTENTION = "omnistage_paged_code_predictor"
"""The paged attention under its own name: the talker engine binds its cache to the talker's layers only."""
_MASK32 = 0xFFFFFFFF


class CodePredictor:
    def __init__(
        self,
        module,
        *,
        max_batch: int,
        device: str | torch.device,
        cuda_graphs: bool = True,
        compile: bool = False,
        seed: int = 0,
    ):
        self.module = module
        config = module.config
        if "sliding_attention" in (getattr(config, "layer_types", None) or []):
            raise ConfigError("model", "the code predictor's sliding-window layers are not supported")
        use_paged_attention(module.model, ATTENTION)
        self.device = torch.device(device)
        self.num_residual = config.num_code_groups - 1
        self.vocab_size = config.vocab_size
        self.positions = self.num_residual + 1  # last hidden, code 0, codes 1..14
        self.width = config.hidden_size
        dtype = next(module.parameters()).dtype
        shape = KVCacheShape(
            num_layers=config.num_hidden_layers,
            num_kv_heads=config.num_key_value_heads,
            head_dim=getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads,
            dtype=dtype,
        )
        self.sizes = bucket_sizes(max_batch)
        self.kv_cache = PagedKVCache(shape, self.sizes[-1] + 1, self.positions, self.device)
        self.kv_cache.bind(paged_attention_modules(module.model, ATTENTION))
        largest = self.sizes[-1]
        self.hidden = torch.zeros((largest, self.width), dtype=dtype, device=self.device)
        self.code0 = torch.zeros((largest, self.width), dtype=dtype, device=self.device)
        self.keys = torch.zeros((largest, 2), dtype=torch.long, device=self.device)
        """Per row: (seed, frame index), the key of its sampling noise."""
        self.greedy = torch.ones(largest, dtype=torch.bool, device=self.device)
        self._layouts = {size: _Layout(size, self.positions, self.device) for size in self.sizes}
        self._seeds = random.Random(seed)
        self.graphs: dict[tuple[int, bool], torch.cuda.CUDAGraph] = {}
        """Per (bucketed batch size, whether any row samples): the captured loop."""
        self.outputs: dict[tuple[int, bool], tuple[torch.Tensor, torch.Tensor]] = {}
        self._compiled = compiled_layers(module.model) if compile else None
        if cuda_graphs and self.device.type == "cuda":
            self._capture()

    def draw_seed(self) -> int:
        """A seed for a request that gave none."""
        return self._seeds.getrandbits(63)

    @torch.inference_mode()
    def run(
        self, hidden: torch.Tensor, code0_embeds: torch.Tensor, seeds: list[int], frames: list[int], greedy: list[bool]
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual codes of n frames ([n, 15] on the device: reading them waits for the loop, so a
        caller reads them once it syncs anyway) and each frame's summed code embeddings [n, width] (code
        0's embedding plus the predictor's embeddings of codes 1..15, the talker's next input as
        transformers sums it). Inputs: the talker's last hidden state and code 0's embedding per row,
        each row's seed, frame index and whether it decodes greedily."""
        codes, embeds = [], []
        for first in range(0, hidden.shape[0], self.sizes[-1]):
            rows = slice(first, first + self.sizes[-1])
            part_codes, part_embeds = self._run_rows(
                hidden[rows], code0_embeds[rows], seeds[rows], frames[rows], greedy[rows]
            )
            codes.append(part_codes)
            embeds.append(part_embeds)
        return torch.cat(codes), torch.cat(embeds)

    def _run_rows(self, hidden, code0_embeds, seeds, frames, greedy):
        count = hidden.shape[0]
        size = next(s for s in self.sizes if s >= count)
        self.hidden[:count].copy_(hidden)
        self.code0[:count].copy_(code0_embeds)
        keys = torch.tensor([[seed, frame] for seed, frame in zip(seeds, frames, strict=True)], dtype=torch.long)
        self.keys[:count].copy_(keys, non_blocking=True)
        self.greedy[:count].copy_(torch.tensor(greedy, dtype=torch.bool), non_blocking=True)
        key = (size, not all(greedy))
        if key in self.graphs:
            self.graphs[key].replay()
            codes, embeds = self.outputs[key]
        else:
            with self._compiled_layers():
                codes, embeds = self._frames(*key)
        return codes[:count].clone(), embeds[:count].clone()

    def _compiled_layers(self):
        return self._compiled.active() if self._compiled is not None else contextlib.nullcontext()

    @torch.inference_mode()
    def _capture(self) -> None:
        """Graphs from the largest batch size down (they share one memory pool), each size twice: for
        greedy batches (no sampling kernels at all) and for batches where some row samples."""
        pool = None
        for size in reversed(self.sizes):
            for sampled in (False, True):
                key = (size, sampled)
                with self._compiled_layers():
                    self._frames(*key)  # lazy initialisations (and compilation) outside the capture
                    torch.cuda.synchronize()
                    graph = torch.cuda.CUDAGraph()
                    try:
                        with torch.cuda.graph(graph, pool=pool, stream=capture_stream()):
                            self.outputs[key] = self._frames(*key)
                    except Exception:
                        logger.exception(
                            "capturing the code predictor for batch %d failed; batches up to it run eagerly", size
                        )
                        self.outputs.pop(key, None)
                        torch.cuda.synchronize()
                        return
                pool = graph.pool() if pool is None else pool
                self.graphs[key] = graph
        torch.cuda.synchronize()

    def _frames(self, size: int, sampled: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """The whole loop over the static buffers' first `size` rows: ([size, 15] codes, [size, width]).
        A sampled loop draws its Gumbel noise for every step and code at once, before the loop."""
        layout = self._layouts[size]
        model, heads = self.module.model, self.module.lm_head
        noise = gumbel_table(self.keys[:size], self.num_residual, self.vocab_size) if sampled else None
        prefill = torch.stack([self.hidden[:size], self.code0[:size]], dim=1).reshape(1, 2 * size, self.width)
        hidden = self._forward(prefill, layout.prefill)[1::2]  # the code-0 rows
        codes, embeds = [], [self.code0[:size]]
        for step in range(self.num_residual):
            logits = heads[step](hidden)
            code = logits.argmax(dim=-1) if noise is None else self._draw(logits, noise[:, step], size)
            embed = model.codec_embedding[step](code)
            codes.append(code)
            embeds.append(embed)
            if step + 1 < self.num_residual:
                hidden = self._forward(embed.unsqueeze(0), layout.decode[step])
        return torch.stack(codes, dim=1), torch.stack(embeds, dim=1).sum(dim=1)

    def _forward(self, embeds: torch.Tensor, step: _Step) -> torch.Tensor:
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=step.slots,
            num_decodes=step.slots.shape[0],
            decode_block_tables=step.block_tables,
            decode_mask=step.mask,
        )
        out = self.module.model(inputs_embeds=embeds, position_ids=step.positions, ar_batch=attention, use_cache=False)
        return out.last_hidden_state[0]

    def _draw(self, logits: torch.Tensor, noise: torch.Tensor, size: int) -> torch.Tensor:
        """Each row's code: the argmax for greedy rows, else a top-k/top-p filtered Gumbel-max draw
        (`noise`: [size, vocab], this step's noise of every code)."""
        logits = logits.float()
        best = logits.argmax(dim=-1)
        values, candidates = logits.topk(min(TOP_K, logits.shape[-1]), dim=-1)  # sorted, largest first
        probs = values.softmax(dim=-1)
        mass_before = probs.cumsum(dim=-1) - probs
        values = values.masked_fill(mass_before >= TOP_P, float("-inf"))  # transformers' TopPLogitsWarper
        drawn = candidates.gather(1, (values + noise.gather(1, candidates)).argmax(dim=-1, keepdim=True)).squeeze(1)
        return torch.where(self.greedy[:size], best, drawn)


def compiled_layers(model) -> CompiledLayers:
    """The predictor's decoder layers compiled (one graph per batch size shared by its layers)."""
    return CompiledLayers(model, attention=ATTENTION)


class _Step:
    """The static attention layout of one forward: cache slots, blocks, masks and positions."""

    def __init__(self, rows: torch.Tensor, positions: torch.Tensor, width: int):
        device = rows.device
        blocks = rows + 1
        self.slots = blocks * width + positions
        self.block_tables = blocks.unsqueeze(1)
        self.mask = (torch.arange(width, device=device).unsqueeze(0) <= positions.unsqueeze(1)).view(-1, 1, 1, width)
        self.positions = positions.unsqueeze(0)


class _Layout:
    def __init__(self, size: int, width: int, device: torch.device):
        rows = torch.arange(size, device=device)
        pairs = rows.repeat_interleave(2)
        self.prefill = _Step(pairs, torch.tensor([0, 1], device=device).repeat(size), width)
        self.decode = [_Step(rows, torch.full((size,), step + 2, device=device), width) for step in range(width - 2)]


def gumbel_noise(keys: torch.Tensor, step: int, candidates: torch.Tensor) -> torch.Tensor:
    """Standard Gumbel noise [rows, k], a pure function of (seed, frame) per row, the step and each
    candidate id: a 32-bit integer hash (Wellons' lowbias32 rounds, multiplications split so int64
    never overflows) of the four, mapped to a uniform in (0, 1)."""
    return _gumbel(keys[:, :1], keys[:, 1:], step, candidates)


def gumbel_table(keys: torch.Tensor, steps: int, vocab_size: int) -> torch.Tensor:
    """`gumbel_noise` of every step and code id at once: [rows, steps, vocab], so that a frame hashes
    once instead of once per step (`table[:, step].gather(1, candidates)` equals
    `gumbel_noise(keys, step, candidates)`)."""
    device = keys.device
    step = torch.arange(steps, device=device).view(1, -1, 1)
    codes = torch.arange(vocab_size, device=device).view(1, 1, -1)
    return _gumbel(keys[:, 0].view(-1, 1, 1), keys[:, 1].view(-1, 1, 1), step, codes)


def _gumbel(seed, frame, step, candidates) -> torch.Tensor:
    state = _mix32(candidates + 0x9E3779B9)
    state = _mix32(state ^ step)
    state = _mix32(state ^ (frame & _MASK32))
    state = _mix32(state ^ (seed & _MASK32))
    state = _mix32(state ^ ((seed >> 32) & _MASK32))
    uniform = ((state >> 8).float() + 0.5) * (1.0 / (1 << 24))
    return -torch.log(-torch.log(uniform))


def _mix32(x: torch.Tensor) -> torch.Tensor:
    x = x & _MASK32
    x = x ^ (x >> 16)
    x = _mul32(x, 0x7FEB352D)
    x = x ^ (x >> 15)
    x = _mul32(x, 0x846CA68B)
    return x ^ (x >> 16)


def _mul32(x: torch.Tensor, constant: int) -> torch.Tensor:
    """(x * constant) mod 2**32 for x < 2**32, in int64 without overflow."""
    low, high = constant & 0xFFFF, constant >> 16
    return (x * low + (((x * high) & 0xFFFF) << 16)) & _MASK32
