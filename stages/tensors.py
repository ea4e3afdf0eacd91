"""Arrays on the wire: numpy / torch arrays to and from `stages.protocol.Tensor`.

The wire spells dtypes the numpy way. numpy has no bfloat16, so bfloat16 travels as
dtype "bfloat16" with the raw 2-byte values; `from_wire` gives it back as a torch
bfloat16 tensor, `to_numpy` widened to float32. torch is imported only when used.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from stages.protocol import Tensor

BFLOAT16 = "bfloat16"


def to_wire(array: Any) -> Tensor:
    """A numpy array or torch tensor (any device) as a wire Tensor (C order, little-endian)."""
    if isinstance(array, np.ndarray):
        return _numpy_to_wire(array)
    if _is_torch_tensor(array):
        return _torch_to_wire(array)
    raise TypeError(f"expected a numpy array or a torch tensor, got {type(array).__name__}")


def from_wire(tensor: Tensor, device: str | None = None) -> Any:
    """The array back as a torch tensor (bfloat16 kept), optionally moved to `device`."""
    import torch

    if tensor.dtype == BFLOAT16:
        raw = np.frombuffer(tensor.data, dtype="<i2").reshape(tensor.shape).copy()
        result = torch.from_numpy(raw).view(torch.bfloat16)
    else:
        result = torch.from_numpy(to_numpy(tensor).copy())
    return result.to(device) if device else result


def to_numpy(tensor: Tensor) -> np.ndarray:
    """The array back as a read-only numpy view of the bytes (bfloat16 widened to float32)."""
    if tensor.dtype == BFLOAT16:
        widened = np.frombuffer(tensor.data, dtype="<u2").astype(np.uint32) << 16
        return widened.view(np.float32).reshape(tensor.shape)
    return np.frombuffer(tensor.data, dtype=np.dtype(tensor.dtype).newbyteorder("<")).reshape(tensor.shape)


def _numpy_to_wire(array: np.ndarray) -> Tensor:
    little = array.astype(array.dtype.newbyteorder("<"), copy=False)
    return Tensor(dtype=little.dtype.name, shape=list(array.shape), data=np.ascontiguousarray(little).tobytes())


def _is_torch_tensor(value: Any) -> bool:
    return type(value).__module__.startswith("torch") and hasattr(value, "detach")


def _torch_to_wire(tensor: Any) -> Tensor:
    import torch

    tensor = tensor.detach().to("cpu").contiguous()
    if tensor.dtype == torch.bfloat16:
        raw = tensor.view(torch.int16).numpy().tobytes()
        return Tensor(dtype=BFLOAT16, shape=list(tensor.shape), data=raw)
    return _numpy_to_wire(tensor.numpy())
