"""Mixture-of-experts blocks without host syncs: routing, dispatch and expert compute on the device.

transformers' eager experts loop over the experts a batch hit (`nonzero()` and `torch.where` read
the routing on the host), so a step that routes through them cannot be captured in a CUDA graph.
`use_grouped_moe(model)` puts a `GroupedMoE` in the place of every sparse MoE block of a Qwen3-Omni
thinker or talker (over transformers' own router and expert modules and weights), which runs every
step as the same fixed sequence of device operations:

1. routing as transformers' router computes it: logits `x @ gate.weight.T`, softmax in float32,
   top-k, renormalised when the config's `norm_topk_prob` says so, cast back to the logits' dtype;
2. dispatch: the N*k (token, expert) pairs sorted by expert (a stable sort), each expert's end
   offset into that order counted on the device (`searchsorted` over the sorted ids);
3. expert compute: the gate/up and down projections as grouped GEMMs over the sorted rows
   (`torch._grouped_mm`, one kernel per projection for all experts), SiLU(gate) * up between;
   each row scaled by its routing weight, put back in token order and summed over the k choices;
4. the shared expert, where the block has one (the talker's): sigmoid(shared_gate(x)) * MLP(x).

Where `torch._grouped_mm` is not available for the weights' device and dtype (CUDA before sm80,
float32 on CUDA, tensors whose strides the CPU kernel refuses), a padded batched GEMM computes the
same thing: every expert's rows are scattered into an [experts, tokens, hidden] buffer (tokens is
enough room for any routing, since a token picks an expert at most once: nothing is dropped) and
multiplied with one `bmm` per projection. Which of the two runs is decided once per block when it
is installed (a probe call on the block's own weights), never inside a forward.

Numerics: each expert's rows see the same matmuls as transformers' loop (the grouped GEMM equals
a per-expert loop exactly on the H200); the k contributions of a token are summed in one reduction
(float32 accumulation) where transformers adds them one expert at a time into a bf16 buffer, so in
bfloat16 the outputs differ by rounding (checked within a stated tolerance on the GPU,
benchmarks/qwen3_omni_check.py); in float32 they agree to float rounding.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

logger = logging.getLogger(__name__)

MOE_BLOCKS = ("Qwen3OmniMoeThinkerTextSparseMoeBlock", "Qwen3OmniMoeTalkerTextSparseMoeBlock")
"""transformers' sparse MoE blocks whose router and experts `GroupedMoE` reproduces."""

GROUPED_MM = "grouped_mm"
PADDED_BMM = "padded_bmm"


def moe_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The sparse MoE blocks of `model` that `use_grouped_moe` knows how to run."""
    return [module for module in model.modules() if type(module).__name__ in MOE_BLOCKS]


def has_host_synced_moe(model: torch.nn.Module) -> bool:
    """Whether a forward of `model` routes tokens through a mixture of experts that syncs with the host:
    any MoE block left with transformers' own forward (CUDA graphs cannot capture those)."""
    for module in model.modules():
        is_moe = hasattr(module, "experts") and hasattr(module, "gate")
        if is_moe and not isinstance(module, GroupedMoE):
            return True
    return False


def use_grouped_moe(model: torch.nn.Module, kernel: str | None = None) -> str | None:
    """Put a `GroupedMoE` in the place of every sparse MoE block of `model`; returns the kernel chosen
    (`grouped_mm` or `padded_bmm`; None when the model has no MoE block). `kernel` forces one."""
    chosen, count = None, 0
    for name, block in list(model.named_modules()):
        if type(block).__name__ in MOE_BLOCKS:
            moe = GroupedMoE(block, kernel)
            _replace(model, name, moe)
            chosen, count = moe.kernel, count + 1
    if count:
        logger.info("%s: %d MoE blocks run without host syncs (%s)", type(model).__name__, count, chosen)
    return chosen


def remove_grouped_moe(model: torch.nn.Module) -> None:
    """transformers' own blocks again (e.g. to compare against them)."""
    for name, module in list(model.named_modules()):
        if isinstance(module, GroupedMoE):
            _replace(model, name, module.original)


def _replace(model: torch.nn.Module, name: str, module: torch.nn.Module) -> None:
    parent, _, child = name.rpartition(".")
    setattr(model.get_submodule(parent), child, module)


class GroupedMoE(torch.nn.Module):
    """One sparse MoE block's computation over the block's own router and experts (registered under
    the block's names, so the weights keep their keys). Its forward is the class's: under
    `torch.compile` every layer's block is the same code, and the decoder layers of a model share
    one compiled graph (a callable installed per block would specialise each layer)."""

    def __init__(self, block: torch.nn.Module, kernel: str | None = None):
        super().__init__()
        self.gate, self.experts = block.gate, block.experts  # their weights are read at every call
        self.shared_expert = getattr(block, "shared_expert", None)
        self.shared_expert_gate = getattr(block, "shared_expert_gate", None)
        self.top_k = self.gate.top_k
        self.normalize = bool(getattr(self.gate, "norm_topk_prob", True))
        self.num_experts = self.experts.num_experts
        self.kernel = kernel or choose_kernel(self.experts.gate_up_proj, self.experts.down_proj)
        self.__dict__["original"] = block  # not a submodule: `remove_grouped_moe` puts it back

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        shape = hidden_states.shape
        x = hidden_states.reshape(-1, shape[-1])
        weights, chosen = self.route(x)
        experts = self._grouped if self.kernel == GROUPED_MM else self._padded
        out = experts(x, chosen, weights)
        if self.shared_expert is not None:
            out = out + torch.sigmoid(self.shared_expert_gate(x)) * self.shared_expert(x)
        return out.reshape(shape)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(weights [N, k] in the logits' dtype, expert ids [N, k]) as transformers' router computes them."""
        logits = F.linear(x, self.gate.weight)
        probs = torch.softmax(logits, dim=-1, dtype=torch.float32)
        weights, chosen = torch.topk(probs, self.top_k, dim=-1)
        if self.normalize:
            weights = weights / weights.sum(dim=-1, keepdim=True)
        return weights.to(logits.dtype), chosen

    def _dispatch(self, chosen: torch.Tensor):
        """The (token, expert) pairs in expert order: (order, sorted expert ids, end offsets [E] int32)."""
        flat = chosen.reshape(-1)
        sorted_experts, order = torch.sort(flat, stable=True)
        boundaries = torch.arange(1, self.num_experts + 1, device=flat.device, dtype=sorted_experts.dtype)
        ends = torch.searchsorted(sorted_experts, boundaries, right=False)
        return order, sorted_experts, ends.to(torch.int32)

    def _grouped(self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        order, _, ends = self._dispatch(chosen)
        rows = x[order // self.top_k]  # [N*k, H], grouped by expert
        gate, up = grouped_mm(rows, self.experts.gate_up_proj.transpose(-2, -1), ends).chunk(2, dim=-1)
        down = grouped_mm(self.experts.act_fn(gate) * up, self.experts.down_proj.transpose(-2, -1), ends)
        return self._combine(down, order, weights, x)

    def _padded(self, x: torch.Tensor, chosen: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        order, sorted_experts, ends = self._dispatch(chosen)
        tokens = x.shape[0]
        starts = torch.cat([ends.new_zeros(1), ends[:-1]]).long()
        rank = torch.arange(order.shape[0], device=x.device) - starts[sorted_experts]  # row within its expert
        padded = x.new_zeros((self.num_experts, tokens, x.shape[-1]))
        padded[sorted_experts, rank] = x[order // self.top_k]
        gate, up = torch.bmm(padded, self.experts.gate_up_proj.transpose(-2, -1)).chunk(2, dim=-1)
        down = torch.bmm(self.experts.act_fn(gate) * up, self.experts.down_proj.transpose(-2, -1))
        return self._combine(down[sorted_experts, rank], order, weights, x)

    def _combine(self, rows: torch.Tensor, order: torch.Tensor, weights: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        """Rows in expert order -> each token's weighted sum over its k experts, in x's dtype."""
        scaled = rows * weights.reshape(-1)[order].unsqueeze(-1)
        unsorted = torch.empty_like(scaled).index_copy_(0, order, scaled)
        return unsorted.view(x.shape[0], self.top_k, -1).sum(dim=1, dtype=torch.float32).to(x.dtype)


def grouped_mm(rows: torch.Tensor, weights: torch.Tensor, ends: torch.Tensor) -> torch.Tensor:
    """rows [S, K] grouped by expert, weights [E, K, N], ends [E] -> [S, N]."""
    return torch._grouped_mm(rows, weights, offs=ends)


def choose_kernel(gate_up: torch.Tensor, down: torch.Tensor) -> str:
    """`grouped_mm` if `torch._grouped_mm` runs on these weights (device, dtype, strides) and agrees
    with a plain matmul on a probe; else `padded_bmm`. Runs once per block, at install."""
    if not hasattr(torch, "_grouped_mm"):
        return PADDED_BMM
    try:
        with torch.inference_mode():
            hidden = gate_up.shape[-1]
            generator = torch.Generator(device=gate_up.device).manual_seed(0)
            rows = torch.randn((2, hidden), generator=generator, device=gate_up.device).to(gate_up.dtype)
            ends = torch.tensor([1] + [2] * (gate_up.shape[0] - 1), dtype=torch.int32, device=gate_up.device)
            up = grouped_mm(rows, gate_up.transpose(-2, -1), ends)
            out = grouped_mm(up[:, : down.shape[-1]].contiguous(), down.transpose(-2, -1), ends)
            expected_up = torch.stack([rows[0] @ gate_up[0].T, rows[1] @ gate_up[1].T])
            expected = torch.stack([up[0, : down.shape[-1]] @ down[0].T, up[1, : down.shape[-1]] @ down[1].T])
            tolerance = 1e-2 if gate_up.dtype in (torch.bfloat16, torch.float16) else 1e-4
            scale = float(expected_up.abs().max()) + float(expected.abs().max()) + 1e-6
            close = float((up - expected_up).abs().max()) + float((out - expected).abs().max()) <= tolerance * scale
    except (RuntimeError, NotImplementedError) as error:
        logger.info("torch._grouped_mm cannot run %s %s experts (%s): padded bmm", gate_up.device, gate_up.dtype, error)
        return PADDED_BMM
    if not close:
        logger.warning("torch._grouped_mm disagrees with matmul on %s %s: padded bmm", gate_up.device, gate_up.dtype)
        return PADDED_BMM
    return GROUPED_MM
