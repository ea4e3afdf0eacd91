"""Qwen2.5-Omni token2wav under concurrency: windows of several requests at different points decode in
one batch with the same audio as each request alone, and CUDA-graph batch buckets up to max_batch
(their padding checked on CPU with the static-buffer evaluation run eagerly)."""

from __future__ import annotations

import numpy as np

from stages.config import StageDeployConfig
from stages.diffusion_knobs import DiffusionKnobs
from stages.protocol import RequestOptions, StageRequest
from stages.tensors import to_numpy

# No starving (low water 0): the windows depend on the frames in only, so runs are comparable. A short
# left context (one DiT block) makes windows from frame 12 on steady: spans of one length wherever they
# start; short spans keep the test quick.
OPTIONS = {"window_max": 12, "window_low_water_s": 0, "token2wav_left_context": 12, "token2wav_lookahead": 6}
SEEDS = {"a": 0, "b": 1, "c": 2}


def _build(model_dir, max_batch=4, max_length=2048):
    from stages.models.qwen2_5_omni import build_token2wav

    deploy = StageDeployConfig(
        first_chunk_size=4, async_chunk_size=8, max_batch=max_batch, max_length=max_length, options=OPTIONS
    )
    return build_token2wav(model_dir, deploy)


def _stream(engine, codes: dict[str, list[int]], every: int = 6, stagger: int = 2):
    """Feed each request `every` codes per step, the i-th starting `stagger` x i steps late; the audio per
    request and the starts of the windows of each batch decoded."""
    begin_decode, calls = engine.decoder.begin, []
    engine.decoder.begin = lambda windows: calls.append([w.start for w in windows]) or begin_decode(windows)
    audio = {name: [] for name in codes}
    step = 0
    while step == 0 or engine.has_unfinished():
        for offset, (name, values) in enumerate(codes.items()):
            begin = every * (step - stagger * offset)
            if 0 <= begin < len(values):
                request = StageRequest(
                    request_id=name,
                    stage_id=2,
                    seq=begin // every,
                    finished=begin + every >= len(values),
                    prompt_token_ids=values[begin : begin + every],
                    options=RequestOptions(diffusion=DiffusionKnobs(seed=SEEDS[name])),
                )
                (engine.add_request if begin == 0 else engine.add_chunk)(request)
        for output in engine.step():
            assert output.error is None
            audio[output.request_id].append(to_numpy(output.payloads["audio"]))
        step += 1
    return {name: np.concatenate(parts) for name, parts in audio.items()}, calls


def test_token2wav_batches_windows_of_requests_at_different_points_with_their_audio_alone(omni_models):
    model = omni_models["qwen2_5_omni"]
    rng = np.random.default_rng(3)
    codes = {name: rng.integers(0, 8192, size=48).tolist() for name in SEEDS}
    together, calls = _stream(_build(model), codes)
    assert any(len(starts) > 1 for starts in calls)  # batches of several requests
    for name in codes:
        alone, _ = _stream(_build(model), {name: codes[name]})
        assert together[name].shape == alone[name].shape == (48 * 480,)
        scale = np.abs(alone[name]).max()
        assert np.allclose(together[name], alone[name], rtol=1e-4, atol=1e-5 * scale)

    # One forward of steady windows at different frames (the engine's deadlines tend to line requests
    # up): each window's audio equals its decode alone.
    from stages.generation.engine import CodeStream, Window

    decoder = _build(model).decoder
    windows = []
    for name, start in zip(SEEDS, (12, 24, 36), strict=True):
        request = StageRequest(request_id=name, options=RequestOptions(diffusion=DiffusionKnobs(seed=SEEDS[name])))
        windows.append(Window(CodeStream(name, decoder.open(request), codes[name]), start, start + 6, final=False))
    assert len({decoder.batch_key(window) for window in windows}) == 1
    for window, audio in zip(windows, decoder.decode(windows), strict=True):
        [alone] = decoder.decode([window])
        assert np.allclose(audio, alone, rtol=1e-4, atol=1e-5 * np.abs(alone).max())


def test_token2wav_graph_buckets_cover_every_batch_up_to_max_batch_padded(omni_models):
    from stages.generation.engine import CodeStream, Window
    from stages.generation.token2wav import EvaluationGraphs

    engine = _build(omni_models["qwen2_5_omni"], max_batch=5, max_length=48)
    decoder = engine.decoder
    assert decoder.graphs is None  # CPU: no CUDA graphs
    graphs = EvaluationGraphs(decoder._ode_function, max_graphs=128, max_batch=5, capture=False)
    assert graphs.sizes == [1, 2, 4, 5]
    assert [graphs.bucket(n) for n in range(1, 7)] == [1, 2, 4, 4, 5, None]
    decoder.graphs = graphs
    engine.warm_up()
    planned = engine.policy.planned_windows(48)
    stream = CodeStream("probe", None, [0] * 48)
    spans = {b - a for a, b in (decoder._span(Window(stream, start, end, False)) for start, end in planned)}
    assert len(spans) >= 3
    assert {(key[0], key[3][0][0]) for key in graphs.graphs} == {
        (size, span) for size in graphs.sizes for span in spans
    }

    rng = np.random.default_rng(4)
    streams = []
    for index in range(3):
        request = StageRequest(request_id=f"r{index}", options=RequestOptions(diffusion=DiffusionKnobs(seed=index)))
        streams.append(CodeStream(request.request_id, decoder.open(request), rng.integers(0, 8192, 48).tolist()))
    start, end = planned[-1]
    windows = [Window(stream, start, end, False) for stream in streams]
    padded = decoder.decode(windows)  # 3 windows in the bucket of 4
    decoder.graphs = None
    for window, audio in zip(windows, padded, strict=True):
        [alone] = decoder.decode([window])
        assert np.allclose(audio, alone, rtol=1e-4, atol=1e-5 * np.abs(alone).max())
