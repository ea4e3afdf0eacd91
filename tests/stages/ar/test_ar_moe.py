"""The host-sync-free MoE forward (`stages.ar.moe`) equals transformers' own sparse MoE blocks.

Each block is built from the tiny Qwen3-Omni configs (thinker: routed experts only; talker: routed
plus a gated shared expert) with seeded random weights and compared, on random inputs of several
token counts, against transformers' eager experts loop and its default experts implementation,
for both kernels the installer can choose (the grouped GEMM and the padded batched GEMM).
"""

from __future__ import annotations

import pytest

KERNELS = ["grouped_mm", "padded_bmm"]
TOKENS = [1, 2, 7, 64]


def _block(kind: str, **overrides):
    import torch
    from transformers.models.qwen3_omni_moe import modeling_qwen3_omni_moe as modeling

    from stages.tiny.qwen_omni import qwen3_omni_config

    whole = qwen3_omni_config()
    config = whole.thinker_config.text_config if kind == "thinker" else whole.talker_config.text_config
    for key, value in overrides.items():
        setattr(config, key, value)
    config._experts_implementation = "eager"
    block_class = (
        modeling.Qwen3OmniMoeThinkerTextSparseMoeBlock
        if kind == "thinker"
        else modeling.Qwen3OmniMoeTalkerTextSparseMoeBlock
    )
    torch.manual_seed(0)
    block = block_class(config).eval()
    with torch.no_grad():
        for parameter in block.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.1)
    return block


def _transformers(block, x, implementation="eager"):
    import torch

    block.experts.config._experts_implementation = implementation
    with torch.no_grad():
        return block(x)


def _close(ours, theirs, rtol=1e-5):
    scale = float(theirs.abs().max())
    return float((ours - theirs).abs().max()) <= rtol * scale + 1e-7


@pytest.mark.parametrize("kind", ["thinker", "talker"])
@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("tokens", TOKENS)
def test_grouped_moe_equals_transformers(kind, kernel, tokens):
    import torch

    from stages.ar.moe import GroupedMoE

    block = _block(kind)
    x = torch.randn(1, tokens, block.experts.hidden_dim, generator=torch.Generator().manual_seed(tokens))
    with torch.no_grad():
        ours = GroupedMoE(block, kernel)(x)
    assert ours.shape == x.shape
    assert _close(ours, _transformers(block, x))
    assert _close(ours, _transformers(block, x, "grouped_mm"))


@pytest.mark.parametrize("kernel", KERNELS)
def test_experts_that_get_no_tokens_and_one_expert_that_gets_all(kernel):
    """Every token the same: all N*k pairs go to the same k experts, the others get none."""
    import torch

    from stages.ar.moe import GroupedMoE

    block = _block("talker")
    x = torch.randn(1, 1, block.experts.hidden_dim).expand(1, 9, -1).contiguous()
    moe = GroupedMoE(block, kernel)
    _, chosen = moe.route(x[0])
    assert len(set(chosen.flatten().tolist())) == block.gate.top_k < block.experts.num_experts
    with torch.no_grad():
        assert _close(moe(x), _transformers(block, x))


@pytest.mark.parametrize("normalize", [True, False])
def test_routing_follows_norm_topk_prob(normalize):
    import torch

    from stages.ar.moe import GroupedMoE

    block = _block("talker", norm_topk_prob=normalize)
    x = torch.randn(1, 5, block.experts.hidden_dim)
    moe = GroupedMoE(block)
    weights, _ = moe.route(x[0])
    assert torch.allclose(weights.sum(-1), torch.ones(5)) == normalize
    with torch.no_grad():
        assert _close(moe(x), _transformers(block, x))


def test_install_on_a_model_and_remove_again():
    """`use_grouped_moe` puts a `GroupedMoE` in the place of every MoE block of a model (graph-safe
    from then on), over the same weights; `remove_grouped_moe` restores transformers' own blocks."""
    import torch
    from transformers.models.qwen3_omni_moe.modeling_qwen3_omni_moe import Qwen3OmniMoeTalkerModel

    from stages.ar.moe import GroupedMoE, has_host_synced_moe, moe_blocks, remove_grouped_moe, use_grouped_moe
    from stages.tiny.qwen_omni import qwen3_omni_config

    torch.manual_seed(0)
    model = Qwen3OmniMoeTalkerModel(qwen3_omni_config().talker_config.text_config).eval()
    with torch.no_grad():  # a bare submodel's fused expert weights are left uninitialised
        for parameter in model.parameters():
            parameter.copy_(torch.randn(parameter.shape) * 0.1)
    blocks = moe_blocks(model)
    assert len(blocks) == model.config.num_hidden_layers
    assert has_host_synced_moe(model)
    assert use_grouped_moe(model) == "grouped_mm"
    assert not has_host_synced_moe(model)
    weights = dict(model.state_dict())
    assert sum(isinstance(module, GroupedMoE) for module in model.modules()) == len(blocks)
    assert not moe_blocks(model) and model.state_dict().keys() == weights.keys()
    remove_grouped_moe(model)
    assert has_host_synced_moe(model) and moe_blocks(model) == blocks


def test_bfloat16_within_rounding_of_transformers():
    """In bfloat16 the k contributions of a token are summed in one float32 reduction (transformers'
    eager loop adds them into a bf16 buffer one expert at a time): the outputs differ by rounding."""
    import torch

    from stages.ar.moe import GroupedMoE

    block = _block("thinker").to(torch.bfloat16)
    x = torch.randn(1, 33, block.experts.hidden_dim).to(torch.bfloat16)
    moe = GroupedMoE(block)
    with torch.no_grad():
        ours = moe(x).float()
    theirs = _transformers(block, x).float()
    assert moe.kernel == "grouped_mm"
    assert torch.allclose(ours, theirs, rtol=2e-2, atol=2e-2 * float(theirs.abs().max()))
    assert torch.equal(ours, _transformers(block, x, "grouped_mm").float())


def test_widths_the_grouped_gemm_refuses_fall_back_to_the_padded_bmm():
    """torch's CPU grouped GEMM needs 16-byte strides: a hidden size of 6 float32 values is refused at
    install (a probe call), and the padded batched GEMM computes the same outputs."""
    import torch

    from stages.ar.moe import GroupedMoE

    block = _block("thinker", hidden_size=6, moe_intermediate_size=10)
    moe = GroupedMoE(block)
    assert moe.kernel == "padded_bmm"
    x = torch.randn(1, 4, 6)
    with torch.no_grad():
        assert _close(moe(x), _transformers(block, x))
