"""Chunked code2wav, concurrency, multimodal inputs, cancellation, failures and bad input for the omni pipelines."""

from __future__ import annotations

import base64
import io

import numpy as np
import pytest
from conftest import run_chain

from stages.config import StageDeployConfig
from stages.errors import InvalidRequest
from stages.protocol import SamplingParams, StageRequest
from stages.tensors import to_numpy, to_wire

GREEDY_TALKER = SamplingParams(temperature=0, max_tokens=16)


def _drive(engine, chunks, make):
    outputs = []
    engine.add_request(make(chunks[0], 0, len(chunks) == 1))
    fed = 1
    while engine.has_unfinished():
        outputs += engine.step()
        if fed < len(chunks):
            engine.add_chunk(make(chunks[fed], fed, fed == len(chunks) - 1))
            fed += 1
    return outputs


def _first_outputs(engine):
    """Step until outputs come: a window decodes over several steps (one piece of its ODE each)."""
    while not (outputs := engine.step()):
        assert engine.has_unfinished()
    return outputs


def _audio(outputs):
    return np.concatenate([to_numpy(output.payloads["audio"]) for output in outputs])


def test_omni_code2wav_chunks_equal_whole_sequence(omni_models):
    from stages.models.qwen3_omni import build_code2wav

    codes = np.random.default_rng(0).integers(0, 2048, size=(60, 16)).astype(np.int32)
    exact = {"code2wav_left_context": "exact"}
    engine = build_code2wav(
        omni_models["qwen3_omni"], StageDeployConfig(first_chunk_size=5, async_chunk_size=10, options=exact)
    )

    def make(part, seq, finished):
        return StageRequest(request_id="r", stage_id=2, seq=seq, finished=finished, payloads={"codes": to_wire(part)})

    whole = _audio(_drive(engine, [codes], make))
    outputs = _drive(engine, [codes[i : i + 4] for i in range(0, 60, 4)], make)
    assert len(outputs) > 3 and outputs[0].params["frames"] == [0, 5]
    chunked = _audio(outputs)
    assert chunked.shape == whole.shape
    assert np.allclose(chunked, whole, rtol=1e-5, atol=1e-6 * np.abs(whole).max())


def test_qwen3_code2wav_batches_windows_of_requests_at_different_points(omni_models):
    """Windows of equal span length share one forward whatever their starts: three requests streamed one
    step apart are decoded in shared batches, each one's audio equal to its decode alone, and windows at
    different frames in one forward equal their decodes alone."""
    from stages.models.qwen3_omni import build_code2wav

    deploy = StageDeployConfig(first_chunk_size=3, async_chunk_size=5, options={"code2wav_left_context": 4})
    rng = np.random.default_rng(5)
    streams = {name: rng.integers(0, 2048, size=(33, 16)).astype(np.int32) for name in ("a", "b", "c")}

    def make(name, part, seq, finished):
        payloads = {"codes": to_wire(part)}
        return StageRequest(request_id=name, stage_id=2, seq=seq, finished=finished, payloads=payloads)

    def run(names):
        engine = build_code2wav(omni_models["qwen3_omni"], deploy)
        decode, calls = engine.decoder.decode, []
        engine.decoder.decode = lambda windows: calls.append([w.start for w in windows]) or decode(windows)
        audio = {name: [] for name in names}
        fed = dict.fromkeys(names, 0)
        for step in range(40):
            for offset, name in enumerate(names):
                begin = 5 * (step - offset)
                if 0 <= begin < 33 and fed[name] * 5 == begin:
                    part = streams[name][begin : begin + 5]
                    request = make(name, part, fed[name], begin + 5 >= 33)
                    (engine.add_request if fed[name] == 0 else engine.add_chunk)(request)
                    fed[name] += 1
            for output in engine.step():
                assert output.error is None
                audio[output.request_id].append(to_numpy(output.payloads["audio"]))
        assert not engine.has_unfinished()
        return {name: np.concatenate(parts) for name, parts in audio.items()}, calls

    together, calls = run(["a", "b", "c"])
    assert any(len(starts) > 1 for starts in calls)
    for name in ("a", "b", "c"):
        alone, _ = run([name])
        assert together[name].shape == alone[name].shape
        assert np.allclose(together[name], alone[name], rtol=1e-5, atol=1e-6 * np.abs(alone[name]).max())

    # One forward of windows at different frames (the engine's deadlines tend to line requests up):
    # each window's audio equals its decode alone.
    from stages.generation.engine import CodeStream, Window

    decoder = build_code2wav(omni_models["qwen3_omni"], deploy).decoder
    windows = [
        Window(CodeStream(name, None, list(streams[name])), start, start + 5, final=False)
        for name, start in (("a", 8), ("b", 13), ("c", 18))
    ]
    assert len({decoder.batch_key(window) for window in windows}) == 1
    for window, audio in zip(windows, decoder.decode(windows), strict=True):
        [alone] = decoder.decode([window])
        assert np.allclose(audio, alone, rtol=1e-5, atol=1e-6 * np.abs(alone).max())


def test_qwen3_code2wav_left_context_option(omni_models):
    """25 frames of left context by default (transformers' chunked_decode, vLLM-Omni), "exact" for the
    receptive field, any count of frames; anything else fails the build naming the option."""
    from stages.errors import ConfigError
    from stages.models.qwen3_omni import build_code2wav

    def left_context(options):
        return build_code2wav(omni_models["qwen3_omni"], StageDeployConfig(options=options)).decoder.left_context

    assert left_context({}) == 25
    assert left_context({"code2wav_left_context": 7}) == 7
    assert left_context({"code2wav_left_context": "exact"}) == 2 * (72 - 1) + 8
    with pytest.raises(ConfigError) as refused:
        left_context({"code2wav_left_context": "all"})
    assert refused.value.field == "options.code2wav_left_context"


def test_omni_token2wav_chunks_within_documented_tolerance(omni_models):
    from stages.models.qwen2_5_omni import build_token2wav

    codes = np.random.default_rng(0).integers(0, 8192, size=36).tolist()
    deploy = StageDeployConfig(first_chunk_size=5, async_chunk_size=10, options={"window_max": 10})  # three windows
    engine = build_token2wav(omni_models["qwen2_5_omni"], deploy)

    def make(part, seq, finished):
        return StageRequest(request_id="r", stage_id=2, seq=seq, finished=finished, prompt_token_ids=part)

    whole = _audio(_drive(engine, [codes], make))
    outputs = _drive(engine, [codes[i : i + 3] for i in range(0, 36, 3)], make)
    chunked = _audio(outputs)
    assert len(outputs) >= 3 and chunked.shape == whole.shape == (36 * 480,)
    # The DiT's ODE spreads every code over the whole sequence: chunks are close, not equal.
    assert np.linalg.norm(chunked - whole) / np.linalg.norm(whole) < 1e-3


def test_token2wav_dit_autocast_is_close_to_float32_and_bad_values_are_refused(omni_models):
    """`token2wav_dit_autocast: bfloat16` runs the DiT's matmuls in bf16 (the audio changes, a little);
    an unknown precision fails the build naming the option."""
    from stages.errors import ConfigError
    from stages.models.qwen2_5_omni import build_token2wav

    codes = np.random.default_rng(2).integers(0, 8192, size=24).tolist()

    def decode(options):
        engine = build_token2wav(omni_models["qwen2_5_omni"], StageDeployConfig(options=options))
        engine.add_request(StageRequest(request_id="r", stage_id=2, prompt_token_ids=codes))
        return _audio(_first_outputs(engine))

    exact = decode({})
    mixed = decode({"token2wav_dit_autocast": "bfloat16"})
    assert mixed.shape == exact.shape == (24 * 480,)
    difference = np.linalg.norm(mixed - exact) / np.linalg.norm(exact)
    assert 0 < difference < 1e-2
    with pytest.raises(ConfigError) as refused:
        decode({"token2wav_dit_autocast": "int8"})
    assert refused.value.field == "options.token2wav_dit_autocast"


def _whole_and_chunked(omni_models, codes, options):
    """A token2wav engine with these options; the audio of `codes` decoded whole, and its outputs when
    the codes come three at a time (first chunk 5, then windows of 8)."""
    from stages.models.qwen2_5_omni import build_token2wav

    def make(part, seq, finished):
        return StageRequest(request_id="r", stage_id=2, seq=seq, finished=finished, prompt_token_ids=part)

    stage = StageDeployConfig(first_chunk_size=5, async_chunk_size=8, options={"window_max": 8, **options})
    engine = build_token2wav(omni_models["qwen2_5_omni"], stage)
    whole = _audio(_drive(engine, [codes], make))
    chunked = _drive(engine, [codes[i : i + 3] for i in range(0, len(codes), 3)], make)
    return engine, whole, chunked


def test_token2wav_compile_keeps_the_audio_and_compiles_once_for_every_window_length(omni_models):
    """`token2wav_compile: true` runs the DiT's blocks through torch.compile with dynamic shapes: the
    blocks share one graph per look-ahead/look-behind pair, windows of every length reuse them (a
    whole sequence, then chunks of three other lengths), and the audio is the uncompiled decoder's."""
    import torch
    from torch._dynamo.utils import counters

    from stages.errors import ConfigError
    from stages.models.qwen2_5_omni import build_token2wav

    codes = np.random.default_rng(3).integers(0, 8192, size=30).tolist()
    _, eager_whole, eager_chunked = _whole_and_chunked(omni_models, codes, {})
    torch._dynamo.reset()
    before = counters["stats"]["unique_graphs"]
    engine, whole, chunked = _whole_and_chunked(omni_models, codes, {"token2wav_compile": True})
    blocks = engine.decoder.dit.transformer_blocks
    assert (
        len({(block.look_ahead_block, block.look_backward_block) for block in blocks})
        == counters["stats"]["unique_graphs"] - before
    )
    assert [o.params["frames"] for o in chunked] == [o.params["frames"] for o in eager_chunked]
    assert len({tuple(o.params["frames"]) for o in chunked}) >= 3
    assert np.allclose(whole, eager_whole, rtol=1e-4, atol=1e-5 * np.abs(eager_whole).max())
    assert np.allclose(_audio(chunked), _audio(eager_chunked), rtol=1e-4, atol=1e-5 * np.abs(eager_whole).max())
    with pytest.raises(ConfigError) as refused:
        build_token2wav(omni_models["qwen2_5_omni"], StageDeployConfig(options={"token2wav_compile": "yes"}))
    assert refused.value.field == "options.token2wav_compile"


def _fused_activations(decoder) -> bool:
    return decoder.compiled_vocoder and all("forward" in a.__dict__ for a in decoder.bigvgan.resblocks[0].activations)


def _block_attention(decoder) -> bool:
    from stages.generation.block_attention import ATTENTION

    return decoder.dit.config._attn_implementation == ATTENTION


@pytest.mark.parametrize(
    ("option", "applied"),
    [("token2wav_vocoder_compile", _fused_activations), ("token2wav_block_attention", _block_attention)],
)
def test_token2wav_options_that_keep_the_audio(omni_models, option, applied):
    """`token2wav_vocoder_compile: true` (BigVGAN's activations fused and compiled) and
    `token2wav_block_attention: true` (the DiT's attention block by block, stages/generation/block_attention.py)
    take effect, and a whole sequence and a stream of windows sound as without them; a non-boolean value
    is refused."""
    from stages.errors import ConfigError
    from stages.models.qwen2_5_omni import build_token2wav

    codes = np.random.default_rng(5).integers(0, 8192, size=30).tolist()
    _, plain_whole, plain_chunked = _whole_and_chunked(omni_models, codes, {})
    engine, whole, chunked = _whole_and_chunked(omni_models, codes, {option: True})
    assert applied(engine.decoder)
    scale = np.abs(plain_whole).max()
    assert np.allclose(whole, plain_whole, rtol=1e-4, atol=1e-5 * scale)
    assert np.allclose(_audio(chunked), _audio(plain_chunked), rtol=1e-4, atol=1e-5 * scale)
    with pytest.raises(ConfigError) as refused:
        build_token2wav(omni_models["qwen2_5_omni"], StageDeployConfig(options={option: 1}))
    assert refused.value.field == f"options.{option}"


@pytest.mark.parametrize("part", ["dit", "vocoder"])
def test_token2wav_whose_compiled_parts_fail_decodes_uncompiled(omni_models, caplog, part):
    """A compilation that fails (here: the compiled DiT blocks' or BigVGAN activations' forwards raise)
    costs no audio: the decoder logs it, restores every part's own forward and decodes the same window
    again."""
    from stages.models.qwen2_5_omni import build_token2wav

    codes = np.random.default_rng(4).integers(0, 8192, size=12).tolist()

    def failing(*args, **kwargs):
        raise RuntimeError("inductor: simulated compilation failure")

    def decode(options, break_compiled=False):
        engine = build_token2wav(omni_models["qwen2_5_omni"], StageDeployConfig(options=options))
        if break_compiled:
            decoder = engine.decoder
            broken = decoder.dit.transformer_blocks if part == "dit" else decoder.bigvgan.resblocks[0].activations
            for module in broken:
                module.forward = failing
        engine.add_request(StageRequest(request_id="r", stage_id=2, prompt_token_ids=codes))
        [output] = _first_outputs(engine)
        return engine, output

    _, eager = decode({})
    compiled = {"token2wav_compile": part == "dit", "token2wav_vocoder_compile": part == "vocoder"}
    engine, recovered = decode(compiled, break_compiled=True)
    assert recovered.error is None and engine.decoder.compiled_blocks is engine.decoder.compiled_vocoder is False
    for model in (engine.decoder.dit, engine.decoder.bigvgan):
        assert all("forward" not in module.__dict__ for module in model.modules())
    assert np.allclose(to_numpy(recovered.payloads["audio"]), to_numpy(eager.payloads["audio"]))
    assert "running them uncompiled" in caplog.text


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_omni_eight_concurrent_requests_equal_one_at_a_time(omni_models, family):
    """Thinker, talker (and Qwen3's code predictor) batch the eight requests; each equals its run alone."""
    model = omni_models[family]
    requests = [
        StageRequest(
            request_id=f"r{i}",
            messages=[{"role": "user", "content": "word " * (1 + 3 * i)}],
            sampling=SamplingParams(temperature=0, max_tokens=4 + i),
        )
        for i in range(8)
    ]
    together = run_chain(family, model, requests, GREEDY_TALKER, {"first_chunk_size": 4, "async_chunk_size": 12})
    for request in (requests[0], requests[7]):
        [alone] = run_chain(family, model, [request], GREEDY_TALKER).values()
        ours = together[request.request_id]
        assert ours["tokens"] == alone["tokens"] and ours["codes"] == alone["codes"]
        assert np.allclose(ours["audio"], alone["audio"], rtol=1e-4, atol=1e-5 * np.abs(alone["audio"]).max())


def _wav_b64(seconds=1.0, freq=440.0) -> str:
    import soundfile

    t = np.arange(int(16000 * seconds)) / 16000
    buffer = io.BytesIO()
    soundfile.write(buffer, (0.3 * np.sin(2 * np.pi * freq * t)).astype(np.float32), 16000, format="WAV")
    return base64.b64encode(buffer.getvalue()).decode()


def _png_b64(seed: int) -> str:
    from PIL import Image

    pixels = np.random.default_rng(seed).integers(0, 255, size=(56, 56, 3), dtype=np.uint8)
    buffer = io.BytesIO()
    Image.fromarray(pixels).save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode()


def _mm_request(audio_freq: float, image_seed: int, max_tokens: int = 6, with_image: bool = True) -> StageRequest:
    content = [{"type": "audio", "audio": _wav_b64(freq=audio_freq)}]
    if with_image:
        content.append({"type": "image", "image": _png_b64(image_seed)})
    content.append({"type": "text", "text": "What is this?"})
    return StageRequest(
        request_id="mm",
        messages=[{"role": "user", "content": content}],
        sampling=SamplingParams(temperature=0, max_tokens=max_tokens, stop_token_ids=[151645]),
    )


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_omni_audio_and_image_reach_the_thinker(omni_models, family):
    from stages.models import get_family, load_stage_engine

    model = omni_models[family]
    engine = load_stage_engine(family, "thinker", model, StageDeployConfig())
    placeholder = {"qwen2_5_omni": (151646, 151655), "qwen3_omni": (151675, 151655)}[family]

    def first_output(audio_freq, image_seed):
        request = _mm_request(audio_freq, image_seed)
        prepared = get_family(family).prepare_request(request, model, StageDeployConfig())
        engine.add_request(request)
        outputs = []
        while not outputs:  # the first steps may come before the prompt is prepared (on a thread)
            outputs = engine.step()
        [output] = outputs
        engine.abort(request.request_id)
        return prepared, output

    prepared, base = first_output(440.0, 0)
    assert {"input_features", "feature_attention_mask", "pixel_values", "image_grid_thw"} <= set(prepared.payloads)
    ids = prepared.prompt_token_ids
    assert ids.count(placeholder[0]) > 1 and ids.count(placeholder[1]) > 1  # placeholders expanded
    for changed in (first_output(880.0, 0)[1], first_output(440.0, 1)[1]):
        assert not np.allclose(to_numpy(changed.payloads["hidden"]), to_numpy(base.payloads["hidden"]))


@pytest.mark.parametrize(
    ("content", "field"),
    [
        ([{"type": "video", "video": "x"}], "messages[0].content[0].video"),
        ([{"type": "hologram"}], "messages[0].content[0].type"),
        ([{"type": "audio", "audio": base64.b64encode(b"not audio").decode()}], "messages[0].content[0].audio"),
        ([{"type": "audio", "audio": "%%%"}], "messages[0].content[0].audio"),
        ([{"type": "image", "image": base64.b64encode(b"not an image").decode()}], "messages[0].content[0].image"),
    ],
)
def test_omni_bad_input_names_the_field(omni_models, content, field):
    from stages.models import get_family

    request = StageRequest(request_id="bad", messages=[{"role": "user", "content": content}])
    with pytest.raises(InvalidRequest) as raised:
        get_family("qwen2_5_omni").prepare_request(request, omni_models["qwen2_5_omni"], StageDeployConfig())
    assert raised.value.param == field


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
def test_omni_unknown_voice_is_refused(omni_models, family):
    from stages.omni import Omni

    with Omni(omni_models[family]) as omni, pytest.raises(InvalidRequest) as raised:
        omni.generate({"messages": [{"role": "user", "content": "hi"}], "options": {"voice": "Nobody"}})
    assert raised.value.param == "voice"


def test_omni_code2wav_failure_of_one_request_leaves_others(omni_models):
    from stages.models.qwen3_omni import build_code2wav

    engine = build_code2wav(omni_models["qwen3_omni"], StageDeployConfig(first_chunk_size=2, async_chunk_size=2))
    good = np.random.default_rng(1).integers(0, 2048, size=(8, 16)).astype(np.int32)
    engine.add_request(
        StageRequest(request_id="good", stage_id=2, finished=False, payloads={"codes": to_wire(good[:4])})
    )
    engine.add_request(
        StageRequest(request_id="bad", stage_id=2, finished=False, payloads={"codes": to_wire(good[:4])})
    )
    with pytest.raises(InvalidRequest) as raised:
        engine.add_chunk(
            StageRequest(request_id="bad", stage_id=2, seq=1, payloads={"codes": to_wire(good[:2] + 5000)})
        )
    assert raised.value.param == "codes"
    engine.abort("bad")
    engine.add_chunk(StageRequest(request_id="good", stage_id=2, seq=1, payloads={"codes": to_wire(good[4:])}))
    outputs = []
    while engine.has_unfinished():
        outputs += engine.step()
    assert {output.request_id for output in outputs} == {"good"}
    assert outputs[-1].finished and not any(output.error for output in outputs)


@pytest.mark.parametrize("family", ["qwen2_5_omni", "qwen3_omni"])
async def test_omni_cancel_mid_audio_frees_every_stage(omni_models, family):
    from stages.omni import AsyncOmni

    deploy = {"stages": {"code2wav": {"first_chunk_size": 2, "async_chunk_size": 2}}}
    async with AsyncOmni(omni_models[family], deploy=deploy) as omni:
        stream = omni.generate(
            [{"role": "user", "content": "Tell me a long story"}],
            {"temperature": 0, "max_tokens": 40},
            request_id="cancel-me",
            stage_sampling={"talker": {"temperature": 0, "max_tokens": 64}},
        )
        async for delta in stream:
            if delta.audio is not None:
                omni.abort("cancel-me")
                break
        await stream.aclose()
        import asyncio

        for _ in range(100):
            engines = _engines(omni)
            if engines and not any(engine.has_unfinished() for engine in engines):
                break
            await asyncio.sleep(0.05)
        assert engines and not any(engine.has_unfinished() for engine in engines)


def _engines(omni) -> list:
    return [replica.engine for replica in omni._driver.replicas.values()]


def test_code2wav_drains_a_backlog_chunk_by_chunk(omni_models):
    """A talker that outran the decoder: after the first chunk the rest of the codes (and the end of
    input) arrive at once. They leave in chunk-sized windows, not in one long final decode, and the
    audio still equals the whole-sequence decode."""
    from stages.models.qwen3_omni import build_code2wav

    codes = np.random.default_rng(1).integers(0, 2048, size=(80, 16)).astype(np.int32)
    exact = {"code2wav_left_context": "exact"}
    engine = build_code2wav(
        omni_models["qwen3_omni"], StageDeployConfig(first_chunk_size=5, async_chunk_size=10, options=exact)
    )

    def make(part, seq, finished):
        return StageRequest(request_id="r", stage_id=2, seq=seq, finished=finished, payloads={"codes": to_wire(part)})

    whole = _audio(_drive(engine, [codes], make))
    lookahead = engine.decoder.lookahead
    engine.add_request(make(codes[: 5 + lookahead], 0, False))
    outputs = engine.step()
    assert [output.params["frames"] for output in outputs] == [[0, 5]]
    engine.add_chunk(make(codes[5 + lookahead :], 1, True))
    while engine.has_unfinished():
        outputs += engine.step()
    spans = [end - start for start, end in (output.params["frames"] for output in outputs)]
    assert max(spans[1:]) <= 10 + lookahead and len(outputs) >= 7, spans
    assert np.allclose(_audio(outputs), whole, rtol=1e-5, atol=1e-6 * np.abs(whole).max())
