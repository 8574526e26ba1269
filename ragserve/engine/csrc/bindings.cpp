// The Python module of the engine's CPU kernels; each kernel lives in its own file. Every file
// includes only the ATen and pybind headers it needs: with <torch/extension.h> each one took
// 45-52 s to compile here, and the first start of a machine waited two minutes for them.
#include <torch/csrc/utils/pybind.h>

at::Tensor paged_attention(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache,
                           c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
                           at::Tensor block_tables, at::Tensor token_seqs, at::Tensor token_lens,
                           double scale, at::ScalarType out_dtype);
at::Tensor attend(at::Tensor qkv, int64_t num_heads, int64_t num_kv_heads, at::Tensor k_cache,
                  at::Tensor v_cache, c10::optional<at::Tensor> k_scales,
                  c10::optional<at::Tensor> v_scales, at::Tensor slot_blocks,
                  at::Tensor slot_offsets, at::Tensor block_tables, at::Tensor token_seqs,
                  at::Tensor token_lens, double scale);
void write_kv(at::Tensor k, at::Tensor v, at::Tensor k_cache, at::Tensor v_cache,
              c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
              at::Tensor slot_blocks, at::Tensor slot_offsets);
at::Tensor small_batch_linear(at::Tensor x, at::Tensor weight, c10::optional<at::Tensor> bias,
                              at::ScalarType out_dtype);
at::Tensor add_rms_norm(at::Tensor hidden, c10::optional<at::Tensor> delta, at::Tensor weight,
                        double eps);
void rope_in_place(at::Tensor x, at::Tensor positions, at::Tensor cos_sin, int64_t heads,
                   int64_t head_dim);
at::Tensor silu_mul(at::Tensor gate_up);
at::Tensor packed_bf16_linear(at::Tensor x, at::Tensor packed, c10::optional<at::Tensor> bias,
                              at::ScalarType out_dtype);
at::Tensor int8_linear(at::Tensor x, at::Tensor packed, at::Tensor row_sums, at::Tensor scale,
                       c10::optional<at::Tensor> bias, at::ScalarType out_dtype);
void apply_token_bitmask(at::Tensor logits, at::Tensor rows, at::Tensor bitmask);

// The kernels keep the GIL while they run. Releasing it lets a server's event loop take a core
// in the middle of a parallel region, which then waits for it: on 2 cores a single stream's
// time per token went from 27 to 28-33 ms when released.
PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.def("paged_attention", &paged_attention,
        "Attention of prefill and decode tokens over a paged KV cache");
  m.def("attend", &attend,
        "A layer's attention from its fused qkv rows: store the new keys and values, then attend");
  m.def("write_kv", &write_kv, "Store new keys and values at their slots in the paged cache");
  m.def("small_batch_linear", &small_batch_linear,
        "x W^T (+ bias), weights float32 or bfloat16, float32 accumulation; each row's result "
        "independent of the others");
  m.def("packed_bf16_linear", &packed_bf16_linear,
        "x W^T (+ bias) for a bfloat16 weight packed by packing.pack_pairs, float32 accumulation; "
        "each row's result independent of the others");
  m.def("int8_linear", &int8_linear,
        "(x Q^T) * scale (+ bias) for an int8 weight packed by packing.pack_int8, with per-row "
        "scales; exact integer sums, each row's result independent of the others");
  m.def("add_rms_norm", &add_rms_norm, "hidden += delta in place, then RMSNorm(hidden) * weight");
  m.def("rope_in_place", &rope_in_place, "RoPE on the first heads of each row, in place");
  m.def("silu_mul", &silu_mul, "SiLU(gate) * up of a fused gate_up matrix");
  m.def("apply_token_bitmask", &apply_token_bitmask,
        "-inf, in place, for the tokens whose bit is clear in each row's mask");
}
