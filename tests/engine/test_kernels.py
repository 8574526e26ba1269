"""The C++ kernels against plain PyTorch, and the PyTorch fallbacks against the same
references, in float32 and bfloat16."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ragserve.engine import config, kernels, packing
from ragserve.engine.config import cpu_flags, cpu_vendor, native_bf16
from ragserve.engine.kv_cache import LayerCache, keys_by_position
from ragserve.engine.layers import Projection

DTYPES = [torch.float32, torch.bfloat16]


@pytest.fixture(params=["kernel", "fallback"])
def path(request, monkeypatch):
    if request.param == "kernel":
        assert kernels.extension() is not None, "the C++ kernels must build on this machine"
    else:
        monkeypatch.setattr(kernels, "extension", lambda: None)
    return request.param


@pytest.mark.parametrize("weight_dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 2, 3, 5, 8, 17, 32, 40])
def test_linear_matches_float32_matmul(path, weight_dtype, rows):
    torch.manual_seed(rows)
    # N and K not multiples of the kernel's tiles, so the tails are exercised.
    x = torch.randn(rows, 203)
    weight = torch.randn(37, 203).to(weight_dtype)
    bias = torch.randn(37).to(weight_dtype)
    expected = F.linear(x, weight.float(), bias.float())
    got = kernels.linear(x, weight, bias)
    assert got.dtype == torch.float32 and got.shape == (rows, 37)
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)
    rounded = kernels.linear(x.to(weight_dtype), weight, out_dtype=torch.float32)
    assert rounded.dtype == torch.float32


@pytest.mark.parametrize("x_dtype", DTYPES)
def test_linear_kernel_rows_do_not_depend_on_the_batch(x_dtype):
    """Each output row is reduced in the same order whatever else is in the batch (a bfloat16
    x meets the bfloat16 weight in AVX-512 BF16 dot products where the CPU has them)."""
    torch.manual_seed(0)
    weight = torch.randn(960, 576).to(torch.bfloat16)
    x = torch.randn(kernels.SMALL_BATCH_ROWS, 576).to(x_dtype)
    alone = torch.cat([kernels.linear(x[i : i + 1], weight, invariant=True) for i in range(len(x))])
    for rows in (2, 3, 4, 7, kernels.SMALL_BATCH_ROWS):
        assert torch.equal(kernels.linear(x[:rows], weight, invariant=True), alone[:rows])
    short = kernels.small_batch_rows(weight)
    assert torch.equal(kernels.linear(x[:short], weight), alone[:short])


@pytest.mark.parametrize("rows", [1, 3, 4, 5, 9, 33])
@pytest.mark.parametrize("k", [31, 64, 203, 576])
def test_bfloat16_inputs_match_the_float32_product_of_their_values(rows, k):
    """bfloat16 x and weight (the bfloat16 model's projections) in the small-batch kernel: the
    products are exact in float32, so the result is the matmul of the same values up to
    float32 summation, whichever instructions (AVX-512 BF16 dot products, or widening), the
    tails of K past a 32-wide block and of N past a tile included."""
    torch.manual_seed(rows * k)
    x = torch.randn(rows, k).to(torch.bfloat16)
    weight = torch.randn(37, k).to(torch.bfloat16)
    bias = torch.randn(37).to(torch.bfloat16)
    expected = F.linear(x.double(), weight.double(), bias.double())
    got = kernels.linear(x, weight, bias, out_dtype=torch.float32, invariant=True)
    # float32 sums of k products of magnitude ~1: within k * 2^-24 * sum |products|.
    bound = k * 2**-23 * (x.double().abs() @ weight.double().abs().T) + 1e-6
    assert ((got.double() - expected).abs() <= bound).all()
    rounded = kernels.linear(x, weight, bias, invariant=True)
    assert rounded.dtype == torch.bfloat16
    assert torch.equal(rounded, got.to(torch.bfloat16)), "bfloat16 output is the rounded float32"


def int8_weight(n: int, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    weight = torch.randn(n, k)
    scale = weight.abs().amax(dim=1) / 127
    return torch.round(weight / scale[:, None]).to(torch.int8), scale


def int8_linear(x, q, scale, bias, out_dtype):
    packed, row_sums = packing.pack_int8(q)
    return kernels.extension().int8_linear(x, packed, row_sums, scale, bias, out_dtype)


def test_packing_an_int8_weight_keeps_its_values():
    q = torch.randint(-128, 128, (37, 203), dtype=torch.int8)
    packed, row_sums = packing.pack_int8(q)
    assert packed.shape == (10, 4, packing.TILE_ROWS, packing.INT8_CHUNK)
    assert torch.equal(packing.unpack_rows(packed, 37, 203), q)
    assert torch.equal(row_sums[:37], q.sum(dim=1, dtype=torch.int32))
    assert not row_sums[37:].any()


def test_the_int8_kernel_sums_extreme_weights_and_inputs_exactly():
    """Weights of -128 and 127 against inputs at the ends of their int16 range, over K past
    one block of integer sums: the integer sums neither overflow nor lose the high bytes'
    offset (csrc/int8_linear.cpp)."""
    k = 40000
    q = torch.tensor(
        [[-128] * k, [127] * k, [-128, 127] * (k // 2), [1] * k, [0] * k], dtype=torch.int8
    )
    x = torch.tensor([[1.0] * k, [-1.0] * k, [1.0, -1.0] * (k // 2)])
    got = int8_linear(x, q, torch.ones(5), None, torch.float32)
    expected = x.double() @ q.double().T
    torch.testing.assert_close(got.double(), expected, rtol=1e-6, atol=0)


@pytest.mark.parametrize("x_dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 3, 4, 5, 9])
@pytest.mark.parametrize("k", [31, 64, 203, 576, 4099])
def test_int8_kernel_matches_the_float_product_with_its_weight(x_dtype, rows, k):
    """The int8 kernel against the float64 product of x and the int8 weight times its scales.
    Its only rounding of the inputs is x's to int16 (half a step of 2^-15 of the row's largest
    magnitude, times the sum of the weight's magnitudes); past that, float32 sums. K past 4096
    crosses an integer block; K and N not multiples of a vector or a tile exercise the tails."""
    torch.manual_seed(rows * k)
    x = (torch.randn(rows, k) * torch.rand(rows, 1) * 10).to(x_dtype)
    q, scale = int8_weight(37, k)
    bias = torch.randn(37)
    weight = q.double() * scale.double()[:, None]
    expected = x.double() @ weight.T + bias.double()
    got = int8_linear(x, q, scale, bias, torch.float32)
    step = x.double().abs().amax(dim=1, keepdim=True) / 32767
    bound = 0.5 * step * weight.abs().sum(dim=1) + k * 2**-22 * (x.double().abs() @ weight.abs().T)
    assert ((got.double() - expected).abs() <= bound + 1e-5).all()
    rounded = int8_linear(x, q, scale, bias, torch.bfloat16)
    assert torch.equal(rounded, got.to(torch.bfloat16)), "bfloat16 output is the rounded float32"


def test_int8_rows_do_not_depend_on_the_batch():
    torch.manual_seed(0)
    q, scale = int8_weight(960, 576)
    x = torch.randn(kernels.SMALL_BATCH_ROWS, 576).to(torch.bfloat16)
    alone = torch.cat(
        [int8_linear(x[i : i + 1], q, scale, None, torch.float32) for i in range(len(x))]
    )
    for rows in (2, 3, 4, 7, kernels.SMALL_BATCH_ROWS):
        assert torch.equal(int8_linear(x[:rows], q, scale, None, torch.float32), alone[:rows])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("rows", [1, 8, 40])
def test_an_int8_projection_rounds_each_weight_to_within_half_its_row_step(path, dtype, rows):
    """to_int8: every weight within half a step (its row's largest magnitude / 127) of the
    original; short inputs (the int8 kernel) and long ones (a matmul on the rounded weight, the
    only path without the kernels) give the product with the rounded weight."""
    torch.manual_seed(rows)
    original = torch.randn(37, 203).to(dtype)
    bias = torch.randn(37).to(dtype)
    projection = Projection.of(original.clone(), bias)
    projection.to_int8()
    assert projection.weight.dtype == torch.int8 and projection.scale.shape == (37,)
    values = packing.unpack_rows(projection.weight, 37, 203)
    rounded = values.float() * projection.scale[:, None]
    step = original.float().abs().amax(dim=1, keepdim=True) / 127
    assert ((rounded - original.float()).abs() <= step / 2 + 1e-6).all()
    x = torch.randn(rows, 203).to(dtype)
    expected = F.linear(x.float(), rounded.to(dtype).float(), bias.float())
    # float32: within the int8 kernel's rounding of x to int16 (a few 1e-4 here).
    tolerance = 5e-3 if dtype == torch.float32 else 0.15
    got = projection(x, out_dtype=torch.float32)
    torch.testing.assert_close(got, expected, atol=tolerance, rtol=tolerance / 10)


@pytest.mark.parametrize("weight_dtype", DTYPES)
@pytest.mark.parametrize("rows", [8, 40, 300])
def test_a_projection_gives_the_matmul_result_at_every_length(path, weight_dtype, rows):
    """A bfloat16 weight keeps a copy laid out at load for long inputs (oneDNN's blocked
    layout), in float32 where the CPU has no bfloat16 matmul; short inputs read the weight
    itself. A float32 input gets the float32 matmul's result either way."""
    torch.manual_seed(rows)
    x = torch.randn(rows, 203)
    weight = torch.randn(37, 203).to(weight_dtype)
    bias = torch.randn(37).to(weight_dtype)
    projection = Projection.of(weight, bias)
    copy = projection.long_input
    if weight_dtype == torch.float32:
        assert copy is None, "float32 weights keep no copy"
    elif torch.backends.mkldnn.is_available():
        assert copy.is_mkldnn
        assert copy.dtype == (torch.bfloat16 if native_bf16() else torch.float32)
    expected = F.linear(x, weight.float(), bias.float())
    torch.testing.assert_close(projection(x), expected, atol=1e-4, rtol=1e-4)
    rounded = projection(x.to(weight_dtype), out_dtype=torch.float32)
    assert rounded.dtype == torch.float32 and rounded.shape == (rows, 37)
    # bfloat16 inputs: within bfloat16 rounding of the float32 matmul on the same values.
    expected = F.linear(x.to(weight_dtype).float(), weight.float(), bias.float())
    torch.testing.assert_close(rounded, expected, atol=0.1, rtol=2e-2)


def reference_norm(hidden, weight, eps):
    x32 = hidden.float()
    x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x32.to(hidden.dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_delta", [False, True])
@pytest.mark.parametrize("width", [96, 100])
def test_add_rms_norm(path, dtype, with_delta, width):
    torch.manual_seed(1)
    hidden = torch.randn(5, width).to(dtype)
    delta = torch.randn(5, width).to(dtype) if with_delta else None
    weight = torch.randn(width).to(dtype)
    expected_hidden = hidden + delta if with_delta else hidden.clone()
    expected = reference_norm(expected_hidden, weight, 1e-5)
    got = kernels.add_rms_norm(hidden, delta, weight, 1e-5)
    assert torch.equal(hidden, expected_hidden), "the residual stream is updated in place"
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(got.float(), expected.float(), atol=tolerance, rtol=tolerance)


@pytest.mark.parametrize("dtype", DTYPES)
def test_rope_rotates_q_and_k_heads_only(path, dtype):
    torch.manual_seed(2)
    heads, kv_heads, head_dim, max_len = 4, 2, 16, 64
    qkv = torch.randn(6, (heads + 2 * kv_heads) * head_dim).to(dtype)
    positions = torch.tensor([0, 3, 7, 8, 40, 63])
    inv_freq = 1.0 / (10000 ** (torch.arange(0, head_dim, 2).float() / head_dim))
    angles = torch.outer(torch.arange(max_len).float(), inv_freq).repeat(1, 2)
    cos_sin = torch.stack((angles.cos(), angles.sin()))
    rotated_width = (heads + kv_heads) * head_dim
    x = qkv[:, :rotated_width].float().unflatten(1, (heads + kv_heads, head_dim))
    cos, sin = cos_sin[0, positions].unsqueeze(1), cos_sin[1, positions].unsqueeze(1)
    half = head_dim // 2
    expected = x * cos + torch.cat((-x[..., half:], x[..., :half]), -1) * sin
    values = qkv[:, rotated_width:].clone()
    kernels.rope_in_place(qkv, positions, cos_sin, heads + kv_heads, head_dim)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        qkv[:, :rotated_width].float(), expected.flatten(1), atol=tolerance, rtol=tolerance
    )
    assert torch.equal(qkv[:, rotated_width:], values), "values are not rotated"


def test_rope_refuses_a_position_past_the_table():
    cos_sin = torch.zeros(2, 8, 4)
    with pytest.raises(RuntimeError, match="position out of range"):
        kernels.extension().rope_in_place(torch.zeros(1, 8), torch.tensor([8]), cos_sin, 2, 4)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul(path, dtype):
    torch.manual_seed(3)
    gate_up = (torch.randn(3, 2 * 50) * 4).to(dtype)
    gate, up = gate_up.float().chunk(2, dim=-1)
    tolerance = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(
        kernels.silu_mul(gate_up).float(), F.silu(gate) * up, atol=tolerance, rtol=tolerance
    )


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul_of_far_out_gates_is_finite(path, dtype):
    """A gate far below zero makes e^-gate overflow float32; SiLU of it is still about 0."""
    gate = torch.tensor([[-1000.0, -100.0, -88.5, -20.0, 0.0, 20.0, 88.5, 100.0, 1000.0]])
    gate_up = torch.cat((gate, torch.full_like(gate, 1.5)), dim=1).to(dtype)
    got = kernels.silu_mul(gate_up).float()
    assert torch.isfinite(got).all()
    torch.testing.assert_close(got, F.silu(gate.to(dtype).float()) * 1.5, atol=1e-6, rtol=1e-2)


@pytest.mark.parametrize("dtype", DTYPES)
def test_norm_and_silu_give_a_row_the_same_bits_alone_and_in_a_batch(path, dtype):
    """Batch invariance rests on every per-token op: a row's result may not depend on the rows
    beside it, nor on whether the rows were split across threads (widths not a multiple of
    the vector length included)."""
    torch.manual_seed(5)
    for width in (96, 100):
        hidden = torch.randn(1024, width).to(dtype)
        delta = torch.randn(1024, width).to(dtype)
        weight = torch.randn(width).to(dtype)
        alone = kernels.add_rms_norm(hidden[700:701].clone(), delta[700:701], weight, 1e-5)
        batched = kernels.add_rms_norm(hidden.clone(), delta, weight, 1e-5)
        assert torch.equal(alone[0], batched[700])
        gate_up = (torch.randn(1024, 2 * width) * 4).to(dtype)
        assert torch.equal(
            kernels.silu_mul(gate_up[700:701].clone())[0], kernels.silu_mul(gate_up)[700]
        )


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_stores_strided_rows_at_their_slots(path, dtype):
    torch.manual_seed(4)
    kv_heads, head_dim, block_size, blocks = 2, 8, 4, 6
    k_cache = torch.zeros(kv_heads, blocks, head_dim, block_size, 1, dtype=dtype)
    v_cache = torch.zeros(kv_heads, blocks, block_size, head_dim, dtype=dtype)
    # k and v as slices of wider rows, as they come out of the fused qkv projection.
    rows = torch.randn(3, 3 * kv_heads * head_dim).to(dtype)
    k = rows[:, : kv_heads * head_dim].view(3, kv_heads, head_dim)
    v = rows[:, kv_heads * head_dim : 2 * kv_heads * head_dim].view(3, kv_heads, head_dim)
    slot_blocks, slot_offsets = torch.tensor([5, 0, 5]), torch.tensor([3, 0, 1])
    cache = LayerCache(k_cache, v_cache)
    kernels.write_kv(cache, k, v, slot_blocks, slot_offsets)
    slots = zip(slot_blocks.tolist(), slot_offsets.tolist(), strict=True)
    for t, (block, offset) in enumerate(slots):
        assert torch.equal(k_cache[:, block, :, offset, 0], k[t])
        assert torch.equal(v_cache[:, block, offset], v[t])
    assert int((k_cache != 0).sum()) == int((k != 0).sum()), "nothing else is written"
    if path == "kernel":
        with pytest.raises(RuntimeError, match="slot out of range"):
            kernels.write_kv(cache, k, v, torch.tensor([6, 0, 0]), slot_offsets)


@pytest.mark.parametrize("dtype", DTYPES)
def test_write_kv_rounds_into_an_int8_cache_with_a_scale_per_position(path, dtype):
    torch.manual_seed(6)
    kv_heads, head_dim, block_size, blocks = 2, 8, 4, 6
    cache = LayerCache(
        torch.zeros(kv_heads, blocks, head_dim // 4, block_size, 4, dtype=torch.int8),
        torch.zeros(kv_heads, blocks, block_size, head_dim, dtype=torch.int8),
        torch.zeros(kv_heads, blocks, block_size),
        torch.zeros(kv_heads, blocks, block_size),
    )
    rows = (torch.randn(3, 2 * kv_heads * head_dim) * 3).to(dtype)
    rows[1, :head_dim] = 0  # a head whose key is all zeros
    k = rows[:, : kv_heads * head_dim].view(3, kv_heads, head_dim)
    v = rows[:, kv_heads * head_dim :].view(3, kv_heads, head_dim)
    slot_blocks, slot_offsets = torch.tensor([5, 0, 5]), torch.tensor([3, 0, 1])
    kernels.write_kv(cache, k, v, slot_blocks, slot_offsets)
    slots = zip(slot_blocks.tolist(), slot_offsets.tolist(), strict=True)
    for t, (block, offset) in enumerate(slots):
        for stored, scales, x in (
            (
                keys_by_position(cache.keys)[:, block, offset].flatten(-2),
                cache.key_scales[:, block, offset],
                k[t],
            ),
            (cache.values[:, block, offset], cache.value_scales[:, block, offset], v[t]),
        ):
            x = x.float()
            amax = x.abs().amax(-1)
            torch.testing.assert_close(scales, torch.where(amax > 0, amax / 127, 1.0))
            # The largest value lands on +-127 and every value within half a step.
            assert int(stored.abs().amax()) in (0, 127)
            error = (stored.float() * scales.unsqueeze(-1) - x).abs()
            assert bool((error <= scales.unsqueeze(-1) * 0.501).all())
    # Nothing else is written.
    untouched = [tensor.clone() for tensor in cache]
    keys_by_position(untouched[0])[:, slot_blocks, slot_offsets] = 0
    for tensor in untouched[1:]:
        tensor[:, slot_blocks, slot_offsets] = 0
    assert not any(tensor.any() for tensor in untouched)
    if path == "kernel":
        with pytest.raises(RuntimeError, match="needs its key and value scales"):
            kernels.extension().write_kv(
                k, v, cache.keys, cache.values, None, None, slot_blocks, slot_offsets
            )


@pytest.mark.parametrize("vocab", [64, 49152, 49157])
def test_token_bitmask_bans_exactly_the_cleared_bits_of_the_chosen_rows(path, vocab):
    generator = torch.Generator().manual_seed(vocab)
    words = (vocab + 31) // 32
    allowed = torch.rand(3, words * 32, generator=generator) < 0.7
    allowed[0, :64] = False  # whole words banned
    allowed[1, :64] = True  # whole words allowed
    weights = 2 ** torch.arange(32, dtype=torch.int64)
    packed = (allowed.view(3, words, 32).long() * weights).sum(-1)
    bitmask = packed.where(packed < 2**31, packed - 2**32).to(torch.int32)
    logits = torch.randn(5, vocab, generator=generator)
    rows = torch.tensor([4, 0, 2])
    expected = logits.clone()
    for i, row in enumerate(rows.tolist()):
        expected[row, ~allowed[i, :vocab]] = float("-inf")
    kernels.apply_token_bitmask(logits, rows, bitmask)
    assert torch.equal(logits, expected)


def test_a_build_killed_midway_does_not_block_later_starts(tmp_path, monkeypatch):
    """torch marks a build in progress with a `lock` file that a killed build leaves behind;
    later starts must not wait on it forever."""
    import torch.utils.cpp_extension

    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path))
    build_dir = kernels.build_directory()
    build_dir.mkdir(parents=True)
    (build_dir / "lock").touch()
    seen = []

    def load(**kwargs):
        seen.append((build_dir / "lock").exists())
        return "built"

    monkeypatch.setattr(torch.utils.cpp_extension, "load", load)
    assert kernels.extension.__wrapped__() == "built"
    assert seen == [False], "the stale marker was removed before the build"


def test_every_checkout_builds_from_the_same_source_paths(tmp_path, monkeypatch):
    """torch rebuilds an extension whose source paths change: the build reads a copy of the
    sources inside its own directory, never the checkout's csrc/, so two checkouts of the same
    sources share one build instead of rebuilding each other's."""
    import torch.utils.cpp_extension

    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path))
    given = []
    monkeypatch.setattr(
        torch.utils.cpp_extension, "load", lambda **kwargs: given.append(kwargs["sources"])
    )
    kernels.extension.__wrapped__()
    kernels.extension.__wrapped__()
    build_dir = kernels.build_directory()
    assert given[0] == given[1]
    assert all(Path(source).parent == build_dir / "csrc" for source in given[0])
    for name in kernels.SOURCES:
        assert (build_dir / "csrc" / name).read_bytes() == (kernels.CSRC / name).read_bytes()


def test_the_build_directory_follows_the_sources(tmp_path, monkeypatch):
    """Two checkouts sharing a cache directory keep their own builds: a changed source gets a
    directory of its own, the same sources the same one."""
    import shutil

    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path / "home"))
    copy = tmp_path / "csrc"
    shutil.copytree(kernels.CSRC, copy)
    assert kernels.build_directory(copy) == kernels.build_directory()
    (copy / "linear.cpp").write_text((copy / "linear.cpp").read_text() + "\n// changed\n")
    assert kernels.build_directory(copy) != kernels.build_directory()


def test_the_build_directory_follows_the_cpu_and_the_isa(tmp_path, monkeypatch):
    """A cache directory shared by two CPU types (a network home, an image) keeps a build per
    type: a -march=native build can hold instructions the other CPU lacks. RAGSERVE_CPU_ISA=avx2
    builds for x86-64-v3, and avx512 for Cooper Lake's instructions, each in a directory of its
    own."""
    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path))
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "native")
    native = kernels.build_directory()
    monkeypatch.setattr(kernels, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    other_cpu = kernels.build_directory()
    assert other_cpu != native
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx2")
    assert "-march=x86-64-v3" in kernels.compiler_flags()
    avx2 = kernels.build_directory()
    assert avx2 not in (native, other_cpu)
    monkeypatch.setattr(config, "machine_flags", lambda: config.AVX512_NEEDS)
    monkeypatch.setenv("RAGSERVE_CPU_ISA", "avx512")
    assert "-march=cooperlake" in kernels.compiler_flags()
    assert kernels.build_directory() not in (native, other_cpu, avx2)


@pytest.mark.parametrize(
    ("vendor", "prefetches"), [("GenuineIntel", True), ("AuthenticAMD", False), ("", False)]
)
def test_the_weights_are_prefetched_only_on_the_vendor_it_was_measured_to_pay_on(
    tmp_path, monkeypatch, vendor, prefetches
):
    """Software prefetch of the weights' stream made the linear kernels faster on an Intel Xeon
    and slower on an AMD EPYC: the build asks for it by vendor, and a directory shared by the
    two keeps a build for each."""
    monkeypatch.setenv("RAGSERVE_HOME", str(tmp_path))
    monkeypatch.setattr(kernels, "cpu_flags", lambda: frozenset({"avx2", "fma"}))
    monkeypatch.setattr(kernels, "cpu_vendor", lambda: vendor)
    assert ("-DRAGSERVE_SOFTWARE_PREFETCH" in kernels.compiler_flags()) is prefetches
    built_for = kernels.build_directory()
    monkeypatch.setattr(kernels, "cpu_vendor", lambda: "GenuineIntel" if not prefetches else "")
    assert kernels.build_directory() != built_for


def test_the_cpu_vendor_is_read_from_cpuinfo():
    with open("/proc/cpuinfo") as cpuinfo:
        line = next(ln for ln in cpuinfo if ln.startswith("vendor_id"))
    assert cpu_vendor() == line.split(":")[1].strip() != ""


@pytest.mark.skipif(
    "avx512f" not in cpu_flags() or not {"avx2", "fma"} <= cpu_flags(),
    reason="the kernels built here are the AVX2 ones already",
)
def test_the_avx2_kernels_pass_the_kernel_tests_on_a_newer_cpu():
    """The kernels' AVX2 forms, which a CPU with AVX-512 never builds, built for x86-64-v3
    and run through this file's and the attention kernels' tests (a fresh build takes a
    minute; the build is cached like the native one)."""
    import os
    import subprocess
    import sys

    tests = Path(__file__).parent
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-k",
            "not avx2_kernels",
            str(tests / "test_kernels.py"),
            str(tests / "test_attention.py"),
        ],
        env=os.environ | {"RAGSERVE_CPU_ISA": "avx2"},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]


def test_an_int8_projection_with_bfloat16_inputs_works_without_a_bfloat16_matmul(monkeypatch):
    """Where the CPU has no bfloat16 matmul, an int8 weight's copy for long inputs holds
    float32 values; bfloat16 inputs and bias meet it in float32 (a model with biases in
    bfloat16 on an AVX2 CPU)."""
    monkeypatch.setattr(kernels, "native_bf16", lambda: False)
    torch.manual_seed(0)
    projection = Projection.of(torch.randn(37, 203).bfloat16(), torch.randn(37).bfloat16())
    projection.to_int8()
    rounded = packing.unpack_rows(projection.weight, 37, 203).float() * projection.scale[:, None]
    x = torch.randn(40, 203).bfloat16()
    expected = F.linear(x.float(), rounded, projection.bias.float())
    got = projection(x, out_dtype=torch.float32)
    torch.testing.assert_close(got, expected, atol=0.15, rtol=0.015)


def test_without_a_bfloat16_matmul_int8_weights_stream_through_the_kernel_to_32_rows(monkeypatch):
    """There the long inputs' copy is float32, and the int8 kernel stays ahead of it as far as
    the float32 kernel does: 32 rows give each row what it gives alone (the kernel's
    guarantee), where a CPU with a bfloat16 matmul hands them to oneDNN."""
    monkeypatch.setattr(kernels, "native_bf16", lambda: False)
    torch.manual_seed(0)
    projection = Projection.of(torch.randn(96, 64))
    projection.to_int8()
    x = torch.randn(kernels.SMALL_BATCH_ROWS, 64)
    alone = torch.cat([projection(x[i : i + 1]) for i in range(len(x))])
    assert torch.equal(projection(x), alone)


@pytest.mark.skipif(not torch.backends.mkldnn.is_available(), reason="needs oneDNN")
def test_a_float32_int8_projection_keeps_its_rounded_values_in_onednn_layout():
    """Its long inputs multiply the rounded values laid out once for oneDNN (they replace the
    weight, so the layout costs no memory), and get the plain matmul's result."""
    torch.manual_seed(0)
    projection = Projection.of(torch.randn(37, 203))
    projection.to_int8()
    assert projection.long_input.is_mkldnn
    rounded = packing.unpack_rows(projection.weight, 37, 203).float() * projection.scale[:, None]
    x = torch.randn(300, 203)
    torch.testing.assert_close(projection(x), F.linear(x, rounded), atol=1e-4, rtol=1e-4)


def test_an_int8_projection_serves_long_inputs_without_onednn(monkeypatch):
    """Without oneDNN the rounded weight is kept as a plain tensor for long inputs."""
    monkeypatch.setattr(torch.backends.mkldnn, "is_available", lambda: False)
    torch.manual_seed(7)
    projection = Projection.of(torch.randn(37, 203).to(torch.bfloat16))
    projection.to_int8()
    assert projection.long_input is not None and not projection.long_input.is_mkldnn
    x = torch.randn(40, 203).to(torch.bfloat16)
    rounded = packing.unpack_rows(projection.weight, 37, 203).float() * projection.scale[:, None]
    expected = F.linear(x.float(), rounded.to(torch.bfloat16).float())
    got = projection(x, out_dtype=torch.float32)
    torch.testing.assert_close(got, expected, atol=0.15, rtol=0.015)
