"""Packed bfloat16 weights (packing.pack_rows, csrc/packed_bf16_linear.cpp) against the plain
small-batch kernel and float64 references, and packed weights in huge pages."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ragserve.engine import kernels, packing
from ragserve.engine.config import native_bf16
from ragserve.engine.layers import Projection
from ragserve.engine.models import build_model

pytestmark = pytest.mark.skipif(
    not native_bf16() or kernels.extension() is None,
    reason="packed bfloat16 weights need AVX-512 BF16 and the kernels",
)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.int8])
@pytest.mark.parametrize("shape", [(40, 96), (37, 203)])
def test_packing_keeps_every_value(dtype, shape):
    values = (torch.randn(shape) * 50).to(dtype)
    packed = packing.pack_rows(values, packing.BF16_CHUNK)
    assert packed.shape[2:] == (packing.TILE_ROWS, packing.BF16_CHUNK)
    assert torch.equal(packing.unpack_rows(packed, *shape), values)


@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 13])
def test_a_packed_weight_gives_the_plain_kernels_bits(rows):
    """Each (row, weight row) pair meets the same 32-wide dot products in the same order and
    the same sum of lanes as in the plain kernel, so the outputs are the same bits."""
    torch.manual_seed(rows)
    weight = torch.randn(960, 576).to(torch.bfloat16)
    bias = torch.randn(960).to(torch.bfloat16)
    x = torch.randn(rows, 576).to(torch.bfloat16)
    packed = packing.pack_rows(weight, packing.BF16_CHUNK)
    ext = kernels.extension()
    for out_dtype in (torch.float32, torch.bfloat16):
        plain = ext.small_batch_linear(x, weight, bias, out_dtype)
        assert torch.equal(ext.packed_bf16_linear(x, packed, bias, out_dtype), plain)


def test_packed_rows_do_not_depend_on_the_batch():
    torch.manual_seed(0)
    packed = packing.pack_rows(torch.randn(960, 576).to(torch.bfloat16), packing.BF16_CHUNK)
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
        x, packing.pack_rows(weight, packing.BF16_CHUNK), None, torch.float32
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
    values = packing.unpack_rows(projection.weight, 40, 96).float() * projection.scale[:, None]
    step = weight.float().abs().amax(dim=1, keepdim=True) / 127
    assert ((values - weight.float()).abs() <= step / 2 + 1e-6).all()


def mapping_flags(address: int) -> list[str]:
    """The VmFlags of this process's mapping that holds address (/proc/self/smaps)."""
    inside = False
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split()[0]
        if "-" in head and not head.endswith(":"):
            start, end = (int(part, 16) for part in head.split("-"))
            inside = start <= address < end
        elif inside and head == "VmFlags:":
            return line.split()[1:]
    raise AssertionError(f"no mapping holds {address:#x}")


def test_weights_move_into_one_mapping_asked_for_huge_pages():
    torch.manual_seed(0)
    tensors = [
        torch.randn(40, 96).to(torch.bfloat16),
        torch.randint(-128, 128, (3, 7), dtype=torch.int8),
        torch.randn(5),
    ]
    moved = packing.in_huge_pages(tensors)
    for original, copy in zip(tensors, moved, strict=True):
        assert torch.equal(copy, original) and copy.is_contiguous()
        assert copy.data_ptr() != original.data_ptr() and copy.data_ptr() % 64 == 0
    assert moved[0].data_ptr() % packing.HUGE_PAGE == 0
    assert moved[1].data_ptr() == moved[0].data_ptr() + tensors[0].nbytes
    if Path("/sys/kernel/mm/transparent_hugepage/enabled").exists():
        assert "hg" in mapping_flags(moved[0].data_ptr())
    assert packing.in_huge_pages([]) == []


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
    assert all(weight.dim() == 4 for weight in packed)
    address = packed[0].data_ptr()
    assert address % packing.HUGE_PAGE == 0
    for weight in packed:
        assert weight.data_ptr() == address
        address += -(-weight.nbytes // 64) * 64
