"""Packed bfloat16 weights (packing.pack_pairs, csrc/packed_bf16_linear.cpp) against float64
references, the packed layouts, and packed weights in huge pages."""

import pytest
import torch
import torch.nn.functional as F

from ragserve.engine import kernels, memory, packing
from ragserve.engine.config import native_bf16
from ragserve.engine.layers import Projection
from ragserve.engine.models import build_model

pytestmark = pytest.mark.skipif(
    not native_bf16() or kernels.extension() is None,
    reason="packed bfloat16 weights need AVX-512 BF16 and the kernels",
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(40, 96), (37, 203)])
def test_row_tiles_keep_every_value(dtype, shape):
    values = (torch.randn(shape) * 50).to(dtype)
    packed = packing.pack_rows(values, packing.INT8_CHUNK)
    assert packed.shape[2:] == (packing.TILE_ROWS, packing.INT8_CHUNK)
    assert torch.equal(packing.unpack_rows(packed, *shape), values)


def test_column_pairs_keep_every_value():
    values = torch.randn(48, 96).to(torch.bfloat16)
    packed = packing.pack_pairs(values)
    assert packed.shape == (3, 48, packing.PAIR_BLOCK, 2)
    # Block 1, pair 5, output 2 of the block: row 16 + 2, columns 10 and 11.
    assert torch.equal(packed[1, 5, 2], values[18, 10:12])
    assert torch.equal(packing.unpack_pairs(packed), values)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13, 40])
def test_a_packed_weight_meets_bfloat16_rows_in_float32_sums(rows):
    """Products of bfloat16 values are exact in float32; each output sums them in one float32
    chain over K, so it is within K float32 roundings of the float64 product. A bfloat16
    output is that float32 result (bias added) rounded once."""
    torch.manual_seed(rows)
    weight = torch.randn(960, 576).to(torch.bfloat16)
    bias = torch.randn(960).to(torch.bfloat16)
    x = torch.randn(rows, 576).to(torch.bfloat16)
    packed = packing.pack_pairs(weight)
    linear = kernels.extension().packed_bf16_linear
    got = linear(x, packed, bias, torch.float32)
    expected = x.double() @ weight.double().T + bias.double()
    bound = 576 * 2**-23 * (x.double().abs() @ weight.double().abs().T + bias.double().abs())
    assert ((got.double() - expected).abs() <= bound + 1e-6).all()
    assert torch.equal(linear(x, packed, bias, torch.bfloat16), got.to(torch.bfloat16))


def test_packed_rows_do_not_depend_on_the_batch():
    """Rows are computed in tiles of eight and output blocks in threes; whichever tile a row
    falls in, and however many rows come with it, it gets the same bits."""
    torch.manual_seed(0)
    packed = packing.pack_pairs(torch.randn(960, 576).to(torch.bfloat16))
    x = torch.randn(130, 576).to(torch.bfloat16)
    linear = kernels.extension().packed_bf16_linear
    alone = torch.cat([linear(x[i : i + 1], packed, None, torch.float32) for i in range(130)])
    for rows in (2, 3, 4, 7, 9, 17, 32, 130):
        assert torch.equal(linear(x[:rows], packed, None, torch.float32), alone[:rows])
    assert torch.equal(linear(x[5:14], packed, None, torch.float32), alone[5:14])


def test_output_blocks_past_whole_groups_are_computed():
    """960 outputs are 60 blocks, 20 whole groups of three; 64 outputs leave one block over."""
    torch.manual_seed(1)
    weight = torch.randn(64, 576).to(torch.bfloat16)
    x = torch.randn(3, 576).to(torch.bfloat16)
    got = kernels.extension().packed_bf16_linear(x, packing.pack_pairs(weight), None, torch.float32)
    torch.testing.assert_close(got, x.float() @ weight.float().T, atol=1e-3, rtol=1e-4)


@pytest.mark.parametrize("rows", [1, 3, 8])
def test_float32_inputs_meet_a_packed_weight_in_float32(rows):
    """A float32 x is not rounded to bfloat16: the result is the float64 product of its values
    with the weight's, up to float32 sums."""
    torch.manual_seed(rows)
    weight = torch.randn(64, 576).to(torch.bfloat16)
    x = torch.randn(rows, 576)
    got = kernels.extension().packed_bf16_linear(x, packing.pack_pairs(weight), None, torch.float32)
    expected = x.double() @ weight.double().T
    bound = 576 * 2**-23 * (x.double().abs() @ weight.double().abs().T) + 1e-6
    assert ((got.double() - expected).abs() <= bound).all()


def test_the_packed_kernel_refuses_a_plain_weight():
    with pytest.raises(RuntimeError, match="packed must be"):
        kernels.extension().packed_bf16_linear(
            torch.randn(1, 64).bfloat16(), torch.randn(8, 64).bfloat16(), None, torch.float32
        )


@pytest.mark.parametrize("rows", [1, 8, 200])
def test_a_projection_packs_a_bfloat16_weight_that_blocks_whole(rows):
    """Its weight is packed for short inputs; long ones meet the packed weight too where the
    kernel leads there (no oneDNN copy is kept), the oneDNN copy elsewhere; a float32 input,
    short or long, meets it in float32; and a projection whose shape does not block whole
    keeps its plain weight."""
    torch.manual_seed(rows)
    weight = torch.randn(48, 96).to(torch.bfloat16)
    bias = torch.randn(48).to(torch.bfloat16)
    projection = Projection.of(weight.clone(), bias)
    assert projection.weight.dim() == 4
    assert (projection.long_input is None) == kernels.packed_long_inputs()
    assert Projection.of(torch.randn(40, 96).to(torch.bfloat16)).weight.dim() == 2
    x = torch.randn(rows, 96)
    expected = F.linear(x.double(), weight.double(), bias.double())
    got = projection(x.to(torch.bfloat16), out_dtype=torch.float32)
    rounded = F.linear(x.to(torch.bfloat16).double(), weight.double(), bias.double())
    torch.testing.assert_close(got.double(), rounded, atol=0.05, rtol=0.01)
    torch.testing.assert_close(projection(x).double(), expected, atol=1e-4, rtol=1e-4)


def test_an_int8_projection_rounds_a_packed_bfloat16_weight():
    torch.manual_seed(0)
    weight = torch.randn(48, 96).to(torch.bfloat16)
    projection = Projection.of(weight.clone())
    assert projection.weight.dim() == 4
    projection.to_int8()
    values = packing.unpack_rows(projection.weight, 48, 96).float() * projection.scale[:, None]
    step = weight.float().abs().amax(dim=1, keepdim=True) / 127
    assert ((values - weight.float()).abs() <= step / 2 + 1e-6).all()


@pytest.mark.skipif(not kernels.packed_long_inputs(), reason="oneDNN takes long inputs here")
@pytest.mark.parametrize("rows", [kernels.INT8_SMALL_BATCH_ROWS + 1, 40, 300])
def test_an_int8_projection_hands_longer_inputs_to_the_bfloat16_kernel(rows):
    """Past the int8 kernel's rows, inputs of any length meet the rounded values packed in
    pairs, and get what the bfloat16 kernel gives on them; no oneDNN copy is kept."""
    torch.manual_seed(rows)
    projection = Projection.of(torch.randn(48, 96).to(torch.bfloat16), torch.randn(48).bfloat16())
    projection.to_int8()
    rounded = packing.unpack_rows(projection.weight, 48, 96).float() * projection.scale[:, None]
    assert torch.equal(packing.unpack_pairs(projection.long_input), rounded.to(torch.bfloat16))
    x = torch.randn(rows, 96).to(torch.bfloat16)
    expected = kernels.extension().packed_bf16_linear(
        x, packing.pack_pairs(rounded.to(torch.bfloat16)), projection.bias, torch.float32
    )
    assert torch.equal(projection(x, out_dtype=torch.float32), expected)


@pytest.mark.parametrize("quantization", ["none", "int8"])
def test_a_models_packed_weights_lie_one_after_another_in_one_mapping(quantization):
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=128,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        architectures=["LlamaForCausalLM"],
    )
    torch.manual_seed(0)
    weights = LlamaForCausalLM(config).state_dict()
    model = build_model(weights, config, torch.bfloat16, 256, quantization)
    packed = [projection.weight for projection in model.projections()]
    if quantization == "int8" and kernels.packed_long_inputs():
        packed += [projection.long_input for projection in model.projections()]
    assert all(weight.dim() == 4 for weight in packed)
    address = packed[0].data_ptr()
    assert address % memory.HUGE_PAGE == 0
    for weight in packed:
        assert weight.data_ptr() == address
        address += -(-weight.nbytes // 64) * 64
