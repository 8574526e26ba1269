"""Packed bfloat16 weights (kernels.pack_rows, csrc/packed_bf16_linear.cpp) against the plain
small-batch kernel and float64 references."""

import pytest
import torch
import torch.nn.functional as F

from ragserve.engine import kernels
from ragserve.engine.config import native_bf16
from ragserve.engine.layers import Projection

pytestmark = pytest.mark.skipif(
    not native_bf16() or kernels.extension() is None,
    reason="packed bfloat16 weights need AVX-512 BF16 and the kernels",
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(40, 96), (37, 203)])
def test_packing_keeps_every_value(dtype, shape):
    values = (torch.randn(shape) * 50).to(dtype)
    packed = kernels.pack_rows(values, kernels.BF16_CHUNK)
    assert packed.shape[2:] == (kernels.TILE_ROWS, kernels.BF16_CHUNK)
    assert torch.equal(kernels.unpack_rows(packed, *shape), values)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13])
def test_a_packed_weight_gives_the_plain_kernels_bits(rows):
    """Each (row, weight row) pair meets the same 32-wide dot products in the same order and
    the same sum of lanes as in the plain kernel, so the outputs are the same bits."""
    torch.manual_seed(rows)
    weight = torch.randn(960, 576).to(torch.bfloat16)
    bias = torch.randn(960).to(torch.bfloat16)
    x = torch.randn(rows, 576).to(torch.bfloat16)
    packed = kernels.pack_rows(weight, kernels.BF16_CHUNK)
    ext = kernels.extension()
    for out_dtype in (torch.float32, torch.bfloat16):
        plain = ext.small_batch_linear(x, weight, bias, out_dtype)
        assert torch.equal(ext.packed_bf16_linear(x, packed, bias, out_dtype), plain)


def test_packed_rows_do_not_depend_on_the_batch():
    torch.manual_seed(0)
    packed = kernels.pack_rows(torch.randn(960, 576).to(torch.bfloat16), kernels.BF16_CHUNK)
    x = torch.randn(32, 576).to(torch.bfloat16)
    linear = kernels.extension().packed_bf16_linear
    alone = torch.cat([linear(x[i : i + 1], packed, None, torch.float32) for i in range(32)])
    for rows in (2, 3, 4, 7, 32):
        assert torch.equal(linear(x[:rows], packed, None, torch.float32), alone[:rows])


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_float32_inputs_meet_a_packed_weight_in_float32(rows):
    """A float32 x is not rounded to bfloat16: the result is the float64 product of its values
    with the weight's, up to float32 sums."""
    torch.manual_seed(rows)
    weight = torch.randn(64, 576).to(torch.bfloat16)
    x = torch.randn(rows, 576)
    got = kernels.extension().packed_bf16_linear(
        x, kernels.pack_rows(weight, kernels.BF16_CHUNK), None, torch.float32
    )
    expected = x.double() @ weight.double().T
    bound = 576 * 2**-23 * (x.double().abs() @ weight.double().abs().T) + 1e-6
    assert ((got.double() - expected).abs() <= bound).all()


def test_the_packed_kernel_refuses_a_plain_weight():
    with pytest.raises(RuntimeError, match="packed must be"):
        kernels.extension().packed_bf16_linear(
            torch.randn(1, 64).bfloat16(), torch.randn(8, 64).bfloat16(), None, torch.float32
        )


@pytest.mark.parametrize("rows", [1, 8, 40])
def test_a_projection_packs_a_bfloat16_weight_that_tiles_whole(rows):
    """Its weight is packed for short inputs; long ones multiply the oneDNN copy; a float32
    input, short or long, meets it in float32; and a projection whose shape does not tile
    whole keeps its plain weight."""
    torch.manual_seed(rows)
    weight = torch.randn(40, 96).to(torch.bfloat16)
    bias = torch.randn(40).to(torch.bfloat16)
    projection = Projection.of(weight.clone(), bias)
    assert projection.weight.dim() == 4
    assert Projection.of(torch.randn(37, 96).to(torch.bfloat16)).weight.dim() == 2
    x = torch.randn(rows, 96)
    expected = F.linear(x.double(), weight.double(), bias.double())
    got = projection(x.to(torch.bfloat16), out_dtype=torch.float32)
    rounded = F.linear(x.to(torch.bfloat16).double(), weight.double(), bias.double())
    torch.testing.assert_close(got.double(), rounded, atol=0.05, rtol=0.01)
    torch.testing.assert_close(projection(x).double(), expected, atol=1e-4, rtol=1e-4)


def test_an_int8_projection_rounds_a_packed_bfloat16_weight():
    torch.manual_seed(0)
    weight = torch.randn(40, 96).to(torch.bfloat16)
    projection = Projection.of(weight.clone())
    projection.to_int8()
    values = kernels.unpack_rows(projection.weight, 40, 96).float() * projection.scale[:, None]
    step = weight.float().abs().amax(dim=1, keepdim=True) / 127
    assert ((values - weight.float()).abs() <= step / 2 + 1e-6).all()
