"""The generation stage's window policy: growing windows, aligned steady spans, starving, deadlines."""

from __future__ import annotations

import pytest

from stages.config import StageDeployConfig
from stages.errors import ConfigError
from stages.generation.window_policy import StreamProgress, WindowPolicy, earliest_deadline_first, window_policy

POLICY = WindowPolicy(first=5, chunk=25, max_window=96, seconds_per_frame=0.02, lookahead=12, align=12)


def test_windows_grow_from_a_small_first_one_up_to_the_largest():
    assert [POLICY.target(index) for index in range(6)] == [5, 25, 50, 96, 96, 96]
    assert [WindowPolicy.fixed(5, 25, 0.02).target(index) for index in range(4)] == [5, 25, 25, 25]


def test_a_window_waits_for_its_frames_and_the_lookahead():
    stream = StreamProgress(arrived=0.0, available=16)
    assert POLICY.next_window(stream, now=0.0) is None
    stream.available = 17
    assert POLICY.next_window(stream, now=0.0) == (0, 5, False)


def test_later_window_ends_fall_on_the_alignment_so_steady_spans_are_equal():
    windows = POLICY.planned_windows(1000)
    assert windows[:4] == [(0, 5), (5, 30), (30, 84), (84, 180)]
    assert all(end % 12 == 0 for _, end in windows[2:])
    steady = [end - start for start, end in windows[3:]]
    assert set(steady) == {96}
    assert windows[-1][1] + 12 <= 1000


def test_a_request_whose_input_is_done_decodes_the_rest_within_the_largest_window_and_one_never_started_whole():
    assert POLICY.next_window(StreamProgress(0.0, available=300, input_done=True), 0.0) == (0, 300, True)
    tail = StreamProgress(0.0, available=96, input_done=True, emitted=30, windows=2, first_audio_at=0.0)
    assert POLICY.next_window(tail, 0.0) == (30, 96, True)  # fits the window (50 frames, aligned) + look-ahead
    long_tail = StreamProgress(0.0, available=400, input_done=True, emitted=84, windows=3, first_audio_at=0.0)
    assert POLICY.next_window(long_tail, 0.0) == (84, 180, False)
    rest = StreamProgress(0.0, available=101, input_done=True, emitted=5, windows=1, first_audio_at=0.0)
    assert POLICY.next_window(rest, 0.0) == (5, 101, True)  # past the next window (25) but within the largest (96)
    rest.available = 102
    assert POLICY.next_window(rest, 0.0) == (5, 30, False)


def test_a_starving_request_decodes_what_it_has_instead_of_waiting_for_a_larger_window():
    # Third window (50 frames, end 84) needs 96 frames in; 80 are there.
    stream = StreamProgress(arrived=0.0, available=80, emitted=30, windows=2, first_audio_at=0.0)
    buffered_until = 30 * 0.02  # 0.6 s of audio sent
    assert POLICY.next_window(stream, now=buffered_until - 0.5) is None  # 0.5 s still to play
    assert POLICY.next_window(stream, now=buffered_until - 0.2) == (30, 60, False)  # 68 ready, end aligned
    stream.available = 66  # 30 + 24 frames ready at most: less than a chunk
    assert POLICY.next_window(stream, now=buffered_until) is None


def test_deadlines_put_a_new_request_and_a_starving_one_before_a_buffered_one():
    buffered = StreamProgress(arrived=0.0, emitted=200, windows=4, first_audio_at=1.0)  # plays until 5.0
    starving = StreamProgress(arrived=0.5, emitted=30, windows=2, first_audio_at=1.0)  # plays until 1.6
    new = StreamProgress(arrived=2.0)
    assert POLICY.deadline(buffered) == pytest.approx(5.0) and POLICY.buffered_s(buffered, 2.0) == pytest.approx(3.0)
    assert earliest_deadline_first(POLICY, [buffered, new, starving]) == [starving, new, buffered]


def test_policy_from_deploy_config_and_its_options():
    deploy = StageDeployConfig(first_chunk_size=4, async_chunk_size=20)
    policy = window_policy(deploy, 0.02, 12, 12, default_max_window=192)
    assert (policy.first, policy.chunk, policy.max_window, policy.growth, policy.low_water_s) == (4, 20, 192, 2.0, 0.5)
    fixed = window_policy(deploy, 0.08, 2, 1, default_max_window=20)
    assert [fixed.target(i) for i in range(4)] == [4, 20, 20, 20]
    options = {"window_max": 40, "window_growth": 1.5, "window_low_water_s": 0}
    tuned = window_policy(StageDeployConfig(async_chunk_size=20, options=options), 0.02, 12, 12, 192)
    assert [tuned.target(i) for i in range(5)] == [5, 20, 30, 40, 40] and tuned.low_water_s == 0
    for name, value in [("window_max", 10), ("window_growth", 0.5), ("window_low_water_s", "x")]:
        with pytest.raises(ConfigError) as refused:
            window_policy(StageDeployConfig(async_chunk_size=20, options={name: value}), 0.02, 12, 12, 192)
        assert refused.value.field == f"options.{name}"
