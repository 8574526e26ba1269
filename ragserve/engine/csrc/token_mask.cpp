// Structured output's token masks on a step's logits: one bit per vocabulary entry, set when
// the token may come next (llguidance's layout: little-endian 32-bit words). A cleared bit sets
// the logit to -inf, in place. In PyTorch the bits must first be unpacked into a boolean
// matrix the size of the logits, which cost 6-12x the mask's own computation.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include <algorithm>
#include <cstdint>
#include <limits>

void apply_token_bitmask(at::Tensor logits, at::Tensor rows, at::Tensor bitmask) {
  TORCH_CHECK(logits.dim() == 2 && logits.scalar_type() == at::kFloat && logits.stride(1) == 1,
              "logits must be a float32 matrix with contiguous rows");
  TORCH_CHECK(bitmask.dim() == 2 && bitmask.scalar_type() == at::kInt && bitmask.is_contiguous(),
              "bitmask must be a contiguous int32 matrix");
  TORCH_CHECK(rows.dim() == 1 && rows.scalar_type() == at::kLong && rows.is_contiguous() &&
                  rows.size(0) == bitmask.size(0),
              "rows must be int64, one per bitmask row");
  const int64_t vocab = logits.size(1);
  const int64_t words = bitmask.size(1);
  TORCH_CHECK(words * 32 >= vocab, "bitmask is narrower than the vocabulary");
  const int64_t* row_ids = rows.data_ptr<int64_t>();
  const uint32_t* bits = reinterpret_cast<const uint32_t*>(bitmask.data_ptr<int32_t>());
  float* base = logits.data_ptr<float>();
  const float banned = -std::numeric_limits<float>::infinity();
  for (int64_t r = 0; r < rows.size(0); ++r)
    TORCH_CHECK(row_ids[r] >= 0 && row_ids[r] < logits.size(0), "row out of range");
  const int64_t full_words = vocab / 32;
  at::parallel_for(0, rows.size(0), 1, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      float* row = base + row_ids[r] * logits.stride(0);
      const uint32_t* mask = bits + r * words;
      for (int64_t w = 0; w < full_words; ++w) {
        // Only the banned tokens are written: inside a JSON string nearly all are allowed, and
        // elsewhere whole words are banned; reading and rewriting every logit made the pass
        // memory-bound (1.2 ms for 32 rows against 0.14).
        const uint32_t allowed = mask[w];
        float* x = row + w * 32;
        if (allowed == 0) {
          std::fill(x, x + 32, banned);
          continue;
        }
        for (uint32_t ban = ~allowed; ban != 0; ban &= ban - 1) x[__builtin_ctz(ban)] = banned;
      }
      for (int64_t i = full_words * 32; i < vocab; ++i)
        if (!((mask[i / 32] >> (i % 32)) & 1u)) row[i] = banned;
    }
  });
}
