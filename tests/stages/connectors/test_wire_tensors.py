"""Arrays on the wire (stages.tensors): numpy and torch, every dtype the stages send, bfloat16 included."""

from __future__ import annotations

import msgspec
import numpy as np
import pytest

from stages.protocol import StageOutput, decoder, encode
from stages.tensors import from_wire, to_numpy, to_wire


@pytest.mark.parametrize("dtype", ["float32", "float16", "float64", "int64", "int32", "int16", "uint8", "bool"])
def test_numpy_round_trip(dtype):
    array = (np.arange(24).reshape(2, 3, 4) % 3).astype(dtype)
    tensor = to_wire(array)
    assert (tensor.dtype, tensor.shape, tensor.nbytes) == (np.dtype(dtype).name, [2, 3, 4], array.nbytes)
    back = to_numpy(tensor)
    assert back.dtype == array.dtype and (back == array).all()


def test_big_endian_and_non_contiguous_arrays_arrive_as_values():
    array = np.arange(12, dtype=">f4").reshape(3, 4).T
    back = to_numpy(to_wire(array))
    np.testing.assert_array_equal(back, array)
    assert back.shape == (4, 3)


def test_scalars_keep_an_empty_shape():
    assert to_numpy(to_wire(np.array(3.5, dtype=np.float32))).shape == ()


def test_torch_round_trip_including_bfloat16_and_views():
    torch = pytest.importorskip("torch")
    for tensor in (
        torch.randn(3, 5),
        torch.arange(10, dtype=torch.int64),
        torch.randn(4, 6).to(torch.bfloat16),
        torch.randn(6, 4).t(),
    ):
        back = from_wire(to_wire(tensor))
        assert back.dtype == tensor.dtype and torch.equal(back, tensor)
    bf16 = torch.randn(8).to(torch.bfloat16)
    np.testing.assert_array_equal(to_numpy(to_wire(bf16)), bf16.float().numpy())


def test_tensors_travel_inside_messages():
    output = StageOutput(request_id="r", payloads={"audio": to_wire(np.ones(4, dtype=np.float32))})
    back = decoder(StageOutput).decode(encode(output))
    assert back == output and (to_numpy(back.payloads["audio"]) == 1).all()
    assert msgspec.json.decode(msgspec.json.encode(output), type=StageOutput) == output


def test_other_objects_are_rejected():
    with pytest.raises(TypeError, match="numpy array or a torch tensor"):
        to_wire([1, 2, 3])
