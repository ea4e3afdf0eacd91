"""The Qwen3-Omni talker's code predictor as a small batched engine: the 15 residual codes of one frame
for every request in flight, in one loop per talker step.

transformers runs it through `code_predictor.generate(inputs_embeds=[last hidden, code-0 embedding],
max_new_tokens=15)`: a 2-position prefill, then 14 single-token steps, step g reading
`codec_embedding[g-1](code_g)` and sampling code g+1 from `lm_head[g]`. Here the same computation runs
on the weights and modules of transformers' predictor
(`Qwen3OmniMoeTalkerCodePredictorModelForConditionalGeneration`) with the project's paged attention
(under a name of its own) and a cache of its own: one block of 16 positions per batch row (row r owns
block r + 1; block 0 is the null block), overwritten by every frame. The prefill's two positions of a
row run as two rows of one decode batch (each with its own mask), so a frame is 15 forwards of the
predictor's layers, each over the whole batch, and every shape in it is static: on CUDA the whole
loop, sampling included, is captured in one CUDA graph per bucketed batch size (1, 2, 4, 8, 16, ...
as the AR engine's decode graphs) and replayed once per talker step (a size that fails to capture,
logged, and every smaller one run the same loop eagerly). Each size has two graphs: batches where
every row is greedy run no sampling kernels at all.

The loop is bound by kernel launches, not arithmetic (15 forwards of a small model per frame), so
the forward is the predictor's own (`decoder_layer` over the layers, then the final norm), built to
launch few kernels: each layer's q/k/v projections run as one GEMM over their concatenated weights,
and gate/up as another (`merge_projections`, done once at construction; the modules' own weights
become views into the merged tensors, so nothing is held twice and transformers' modules still work
unchanged); the rotary cos/sin of every step are precomputed with the model's `rotary_emb` (each
step's positions are fixed: the prefill's pairs at [0, 1], decode step g at g + 2); the paged
attention is called directly. Norms, activation and rotary application are transformers' own
modules and functions. `compile` (the talker's `options.compile`) compiles `decoder_layer` with
static shapes; its weights arrive through the layer argument, so every layer shares one compiled
graph per batch size and Inductor fuses each layer's elementwise work into few kernels.

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

import random

import torch
import torch.nn.functional as F
from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import apply_rotary_pos_emb

from stages.ar.attention import AttentionBatch, paged_attention_forward, paged_attention_modules, use_paged_attention
from stages.ar.captured_steps import CapturedSteps
from stages.ar.compiled_layers import raise_recompile_limit
from stages.ar.cuda_graphs import bucket_sizes
from stages.ar.kv_cache import KVCacheShape, PagedKVCache
from stages.errors import ConfigError

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
        self.layers = list(module.model.layers[: config.num_hidden_layers])
        for layer in self.layers:
            merge_projections(layer)
        largest = self.sizes[-1]
        self.hidden = torch.zeros((largest, self.width), dtype=dtype, device=self.device)
        self.code0 = torch.zeros((largest, self.width), dtype=dtype, device=self.device)
        self.keys = torch.zeros((largest, 2), dtype=torch.long, device=self.device)
        """Per row: (seed, frame index), the key of its sampling noise."""
        self.greedy = torch.ones(largest, dtype=torch.bool, device=self.device)
        with torch.no_grad():
            self._layouts = {size: _Layout(size, self.positions, self.device, self._rotary) for size in self.sizes}
        self._seeds = random.Random(seed)
        self._layer = compiled_layer() if compile else decoder_layer
        self.steps = CapturedSteps(lambda key: self._frames(*key), "code predictor loop of (batch, sampled)")
        """Per (bucketed batch size, whether any row samples): the captured loop; greedy batches run no
        sampling kernels at all."""
        if cuda_graphs and self.device.type == "cuda":
            self.steps.capture([(size, sampled) for size in self.sizes for sampled in (False, True)])

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
        codes, embeds = self.steps.run(key)
        return codes[:count].clone(), embeds[:count].clone()

    def _rotary(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The rotary (cos, sin) [1, T, head_dim] of positions [T], from the model's own `rotary_emb`."""
        return self.module.model.rotary_emb(self.hidden[:1], positions.unsqueeze(0))

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
        """The predictor's layers and final norm over embeds [1, T, width] at the step's layout -> [T, width]."""
        attention = AttentionBatch(
            kv_cache=self.kv_cache,
            slot_mapping=step.slots,
            num_decodes=step.slots.shape[0],
            decode_block_tables=step.block_tables,
            decode_mask=step.mask,
        )
        hidden = embeds
        for layer in self.layers:
            hidden = self._layer(layer, hidden, step.cos, step.sin, attention)
        return self.module.model.norm(hidden)[0]

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


def merge_projections(layer: torch.nn.Module) -> None:
    """Give a decoder layer merged projections: `self_attn.qkv_weight` ([q_out + k_out + v_out, hidden],
    and `qkv_bias` under `attention_bias`, else None) and `mlp.gate_up_weight` ([2 * intermediate,
    hidden]; `gate_up_bias` None). The modules' own weights (and biases) become views into them."""
    attention, mlp = layer.self_attn, layer.mlp
    _merge(attention, "qkv", [attention.q_proj, attention.k_proj, attention.v_proj])
    _merge(mlp, "gate_up", [mlp.gate_proj, mlp.up_proj])


def _merge(owner: torch.nn.Module, name: str, linears: list[torch.nn.Linear]) -> None:
    """Register `linears`' concatenated weights (and biases) on `owner` as `{name}_weight` and
    `{name}_bias` (non-persistent buffers), then rebind each linear's own to its rows of them."""
    with torch.no_grad():
        weight = torch.cat([linear.weight for linear in linears])
        bias = None if linears[0].bias is None else torch.cat([linear.bias for linear in linears])
    owner.register_buffer(f"{name}_weight", weight, persistent=False)
    owner.register_buffer(f"{name}_bias", bias, persistent=False)
    start = 0
    for linear in linears:
        rows = slice(start, start + linear.out_features)
        linear.weight.data = weight[rows]
        if bias is not None:
            linear.bias.data = bias[rows]
        start = rows.stop


def decoder_layer(
    layer: torch.nn.Module, hidden: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, attention: AttentionBatch
) -> torch.Tensor:
    """One decoder layer (`Qwen3OmniMoeTalkerCodePredictorDecoderLayer`, after `merge_projections`) over
    hidden [1, T, width], with the step's rotary cos/sin [1, T, head_dim] and paged attention batch."""
    attn, mlp = layer.self_attn, layer.mlp
    heads = (*hidden.shape[:-1], -1, attn.head_dim)
    sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
    query, key, value = F.linear(layer.input_layernorm(hidden), attn.qkv_weight, attn.qkv_bias).split(sizes, dim=-1)
    query = attn.q_norm(query.view(heads)).transpose(1, 2)
    key = attn.k_norm(key.view(heads)).transpose(1, 2)
    value = value.view(heads).transpose(1, 2)
    query, key = apply_rotary_pos_emb(query, key, cos, sin)
    out, _ = paged_attention_forward(attn, query, key, value, None, scaling=attn.scaling, ar_batch=attention)
    hidden = hidden + attn.o_proj(out.reshape(*hidden.shape[:-1], -1))
    gate_up = F.linear(layer.post_attention_layernorm(hidden), mlp.gate_up_weight, mlp.gate_up_bias)
    gate, up = gate_up.chunk(2, dim=-1)
    return hidden + mlp.down_proj(mlp.act_fn(gate) * up)


def compiled_layer():
    """`decoder_layer` compiled with static shapes: one graph per batch size, shared by all layers
    (and predictors) of a process, Dynamo's per-code-object recompile limit raised to fit."""
    raise_recompile_limit()
    return torch.compile(decoder_layer, dynamic=False)


class _Step:
    """The static layout of one forward: cache slots, blocks and masks, and its positions' rotary cos/sin."""

    def __init__(self, rows: torch.Tensor, positions: torch.Tensor, width: int, rotary):
        device = rows.device
        blocks = rows + 1
        self.slots = blocks * width + positions
        self.block_tables = blocks.unsqueeze(1)
        self.mask = (torch.arange(width, device=device).unsqueeze(0) <= positions.unsqueeze(1)).view(-1, 1, 1, width)
        self.cos, self.sin = rotary(positions)


class _Layout:
    def __init__(self, size: int, width: int, device: torch.device, rotary):
        rows = torch.arange(size, device=device)
        pairs = rows.repeat_interleave(2)
        self.prefill = _Step(pairs, torch.tensor([0, 1], device=device).repeat(size), width, rotary)
        self.decode = [
            _Step(rows, torch.full((size,), step + 2, device=device), width, rotary) for step in range(width - 2)
        ]


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
