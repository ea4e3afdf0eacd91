"""Seconds of audio in a stream of 16-bit PCM chunks, the first of which may carry a WAV header
(the server's streamed `wav`: a header with unknown sizes, then raw samples)."""

from __future__ import annotations

import struct


class PcmCounter:
    def __init__(self, sample_rate: int | None = None, channels: int = 1):
        self.sample_rate = sample_rate
        self.channels = channels
        self.head = b""  # bytes held until a WAV header is complete
        self.in_header = True
        self.odd = 0  # a sample split across chunks

    def add(self, data: bytes) -> float:
        """The seconds of audio `data` completes."""
        if self.in_header:
            data = self._skip_header(self.head + data)
            if data is None:
                return 0.0
        nbytes = len(data) + self.odd
        frames, self.odd = divmod(nbytes, 2 * self.channels)
        if not self.sample_rate:
            raise ValueError("a raw PCM stream needs its sample rate")
        return frames / self.sample_rate

    def _skip_header(self, data: bytes) -> bytes | None:
        if len(data) < 4 and b"RIFF".startswith(data):
            self.head = data
            return None
        if data[:4] != b"RIFF":
            self.in_header = False  # raw PCM
            return data
        position = 12
        while True:
            if len(data) < position + 8:
                self.head = data
                return None
            chunk, size = data[position : position + 4], struct.unpack("<I", data[position + 4 : position + 8])[0]
            if chunk == b"data":
                self.in_header, self.head = False, b""
                return data[position + 8 :]
            if chunk == b"fmt ":
                if len(data) < position + 8 + 16:
                    self.head = data
                    return None
                _, channels, rate = struct.unpack("<HHI", data[position + 8 : position + 16])
                self.channels, self.sample_rate = channels, rate
            position += 8 + size + (size & 1)
