"""The CUDA stream a generation stage decodes a request's first audio on: the device's highest priority.

Stages that share a GPU step on their own streams, the autoregressive ones on high-priority streams
(stages/orchestrator/replica_streams.py), so that under load a thinker's or talker's decode step goes
ahead of a code2wav batch's pending blocks. For a steady window, whose request still has audio
playing, that is the right order. A request's first window is the opposite case: nothing of it has
been heard yet and its decode is what the first audio waits for, so its pieces run on a stream above
the AR stages'. The window is small (a few frames and the look-ahead) and comes once per request,
so the AR steps it goes ahead of lose little.

Ordering stays the stage's own: a piece on this stream first waits for everything queued on the
stage's stream, and the stage's stream then waits for the piece, so every piece of the stage runs
in the order the engine chose and reads what the one before wrote (CUDA graphs' static buffers
included), whichever stream each ran on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from stages.errors import ConfigError


class FirstAudioStream:
    def __init__(self, device: str):
        import torch

        _, highest = torch.cuda.Stream.priority_range()
        self.stream = torch.cuda.Stream(device=device, priority=highest)

    @contextmanager
    def running(self) -> Iterator[None]:
        """Work queued inside runs on the first-audio stream, ordered after and before the stage's own."""
        import torch

        home = torch.cuda.current_stream(self.stream.device)
        self.stream.wait_stream(home)
        try:
            with torch.cuda.stream(self.stream):
                yield
        finally:
            home.wait_stream(self.stream)


def first_audio_stream(device: str, enabled) -> FirstAudioStream | None:
    """The stream for a CUDA device with the option on (`options.first_audio_priority`); None otherwise."""
    if not isinstance(enabled, bool):
        raise ConfigError("options.first_audio_priority", f"must be true or false, got {enabled!r}")
    if not (enabled and str(device).startswith("cuda")):
        return None
    return FirstAudioStream(device)
