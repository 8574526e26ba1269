"""The C++ kernels against plain PyTorch, and the PyTorch fallbacks against the same
references, in float32 and bfloat16."""

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from ragserve.engine import kernels
from ragserve.engine.config import native_bf16
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


def test_linear_kernel_rows_do_not_depend_on_the_batch():
    """Each output row is reduced in the same order whatever else is in the batch."""
    torch.manual_seed(0)
    weight = torch.randn(960, 576).to(torch.bfloat16)
    x = torch.randn(kernels.SMALL_BATCH_ROWS, 576)
    alone = torch.cat([kernels.linear(x[i : i + 1], weight, invariant=True) for i in range(len(x))])
    for rows in (2, 3, 4, 7, kernels.SMALL_BATCH_ROWS):
        assert torch.equal(kernels.linear(x[:rows], weight, invariant=True), alone[:rows])
    short = kernels.small_batch_rows(weight)
    assert torch.equal(kernels.linear(x[:short], weight), alone[:short])


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
def test_add_rms_norm(path, dtype, with_delta):
    torch.manual_seed(1)
    hidden = torch.randn(5, 96).to(dtype)
    delta = torch.randn(5, 96).to(dtype) if with_delta else None
    weight = torch.randn(96).to(dtype)
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
def test_write_kv_stores_strided_rows_at_their_slots(path, dtype):
    torch.manual_seed(4)
    kv_heads, head_dim, block_size, blocks = 2, 8, 4, 6
    k_cache = torch.zeros(kv_heads, blocks, head_dim, block_size, dtype=dtype)
    v_cache = torch.zeros(kv_heads, blocks, block_size, head_dim, dtype=dtype)
    # k and v as slices of wider rows, as they come out of the fused qkv projection.
    rows = torch.randn(3, 3 * kv_heads * head_dim).to(dtype)
    k = rows[:, : kv_heads * head_dim].view(3, kv_heads, head_dim)
    v = rows[:, kv_heads * head_dim : 2 * kv_heads * head_dim].view(3, kv_heads, head_dim)
    slot_blocks, slot_offsets = torch.tensor([5, 0, 5]), torch.tensor([3, 0, 1])
    kernels.write_kv(k_cache, v_cache, k, v, slot_blocks, slot_offsets)
    slots = zip(slot_blocks.tolist(), slot_offsets.tolist(), strict=True)
    for t, (block, offset) in enumerate(slots):
        assert torch.equal(k_cache[:, block, :, offset], k[t])
        assert torch.equal(v_cache[:, block, offset], v[t])
    assert int((k_cache != 0).sum()) == int((k != 0).sum()), "nothing else is written"
    if path == "kernel":
        with pytest.raises(RuntimeError, match="slot out of range"):
            kernels.write_kv(k_cache, v_cache, k, v, torch.tensor([6, 0, 0]), slot_offsets)


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
