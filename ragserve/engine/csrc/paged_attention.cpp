// Decode attention over the paged KV cache: one query token per sequence.
//
// Each (sequence, kv head) pair is one task: the query heads that share the kv head read the
// sequence's keys and values once, straight from their blocks, with a float32 softmax. This
// replaces a gather of the whole context into a padded tensor, which cost more memory traffic
// than the attention itself.
//
// Layouts (see kv_cache.py): keys [kv_heads, blocks, head_dim, block_size], values
// [kv_heads, blocks, block_size, head_dim]. A block of keys is head_dim runs of block_size
// lanes, so a block's scores are multiply-adds over lanes, with no transpose and no
// horizontal sums.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include "widen.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

constexpr int64_t kMaxBlockSize = 128;
constexpr int64_t kMaxHeadDim = 256;
constexpr int64_t kMaxGroup = 16;
// Multiply-adds (per score or value pass) below which a batch of tasks is not split across
// threads: waking a thread costs about as much as this much work.
constexpr int64_t kMinTaskWork = 1 << 18;

// Blocks are scattered in memory, so the hardware prefetcher cannot guess the next one.
template <typename scalar_t>
static inline void prefetch(const scalar_t* ptr, int64_t elems) {
  const char* bytes = reinterpret_cast<const char*>(ptr);
  for (int64_t off = 0; off < elems * int64_t(sizeof(scalar_t)); off += 64)
    __builtin_prefetch(bytes + off);
}

// kBlock and kDim are the block size and head size when known at compile time (0: read at run
// time); the common shapes get fully unrolled loops with the score lanes in registers.
template <typename scalar_t, int64_t kBlock, int64_t kDim>
static void decode_kernel(const torch::Tensor& q, const torch::Tensor& k_cache,
                          const torch::Tensor& v_cache, const torch::Tensor& block_tables,
                          const torch::Tensor& context_lens, double scale, torch::Tensor& out) {
  const int64_t num_seqs = q.size(0);
  const int64_t num_heads = q.size(1);
  const int64_t head_dim = kDim ? kDim : q.size(2);
  const int64_t num_kv_heads = k_cache.size(0);
  const int64_t cache_blocks = k_cache.size(1);
  const int64_t block_size = kBlock ? kBlock : k_cache.size(3);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t max_blocks = block_tables.size(1);
  const int64_t block_elems = block_size * head_dim;
  const scalar_t* q_ptr = q.data_ptr<scalar_t>();
  const scalar_t* k_ptr = k_cache.data_ptr<scalar_t>();
  const scalar_t* v_ptr = v_cache.data_ptr<scalar_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* lens = context_lens.data_ptr<int64_t>();
  float* out_ptr = out.data_ptr<float>();

  // A task reads len * head_dim keys and values; tasks are grouped so that each thread gets
  // enough of them to pay for waking it (a single short sequence runs on the calling thread).
  int64_t max_len = 1;
  for (int64_t s = 0; s < num_seqs; ++s) max_len = std::max(max_len, lens[s]);
  const int64_t grain = std::max<int64_t>(1, kMinTaskWork / (max_len * head_dim * group));
  at::parallel_for(0, num_seqs * num_kv_heads, grain, [&](int64_t begin, int64_t end) {
    // Fixed-size locals rather than heap vectors, so the compiler can keep them in registers.
    alignas(64) float query[kMaxGroup * kMaxHeadDim];
    alignas(64) float acc[kMaxGroup * kMaxHeadDim];
    alignas(64) float lanes[kMaxGroup * kMaxBlockSize];
    alignas(64) float key_run[kMaxBlockSize];
    alignas(64) float value_row[kMaxHeadDim];
    std::vector<float> scores;
    for (int64_t task = begin; task < end; ++task) {
      const int64_t seq = task / num_kv_heads;
      const int64_t kv_head = task % num_kv_heads;
      const int64_t len = lens[seq];
      const int64_t num_blocks = (len + block_size - 1) / block_size;
      const int64_t* table = tables + seq * max_blocks;
      const scalar_t* k_head = k_ptr + kv_head * cache_blocks * block_elems;
      const scalar_t* v_head = v_ptr + kv_head * cache_blocks * block_elems;
      for (int64_t g = 0; g < group; ++g) {
        const scalar_t* src = q_ptr + (seq * num_heads + kv_head * group + g) * head_dim;
        for (int64_t i = 0; i < head_dim; ++i) query[g * head_dim + i] = widen(src[i]) * scale;
      }
      // scores[g * len + pos]: all positions of one query head, then a softmax per head.
      scores.resize(group * len);
      for (int64_t b = 0; b < num_blocks; ++b) {
        if (b + 1 < num_blocks) prefetch(k_head + table[b + 1] * block_elems, block_elems);
        const scalar_t* keys = k_head + table[b] * block_elems;
        const int64_t first = b * block_size;
        const int64_t count = std::min(block_size, len - first);
        // Each key run is widened once and used by every query head of the group.
        for (int64_t x = 0; x < group * block_size; ++x) lanes[x] = 0.0f;
        for (int64_t i = 0; i < head_dim; ++i) {
          const scalar_t* run = keys + i * block_size;
          for (int64_t j = 0; j < block_size; ++j) key_run[j] = widen(run[j]);
          for (int64_t g = 0; g < group; ++g) {
            const float qi = query[g * head_dim + i];
            float* lane = lanes + g * block_size;
            for (int64_t j = 0; j < block_size; ++j) lane[j] += qi * key_run[j];
          }
        }
        for (int64_t g = 0; g < group; ++g)
          std::copy(lanes + g * block_size, lanes + g * block_size + count,
                    scores.begin() + g * len + first);
      }
      for (int64_t g = 0; g < group; ++g) {
        float* row = scores.data() + g * len;
        const float max_score = *std::max_element(row, row + len);
        float total = 0.0f;
        for (int64_t pos = 0; pos < len; ++pos) {
          row[pos] = std::exp(row[pos] - max_score);
          total += row[pos];
        }
        const float inv_total = 1.0f / total;
        for (int64_t pos = 0; pos < len; ++pos) row[pos] *= inv_total;
      }
      std::fill(acc, acc + group * head_dim, 0.0f);
      for (int64_t b = 0; b < num_blocks; ++b) {
        if (b + 1 < num_blocks) prefetch(v_head + table[b + 1] * block_elems, block_elems);
        const scalar_t* values = v_head + table[b] * block_elems;
        const int64_t first = b * block_size;
        const int64_t count = std::min(block_size, len - first);
        for (int64_t j = 0; j < count; ++j) {
          const scalar_t* value = values + j * head_dim;
          for (int64_t i = 0; i < head_dim; ++i) value_row[i] = widen(value[i]);
          for (int64_t g = 0; g < group; ++g) {
            const float p = scores[g * len + first + j];
            float* a = acc + g * head_dim;
            for (int64_t i = 0; i < head_dim; ++i) a[i] += p * value_row[i];
          }
        }
      }
      for (int64_t g = 0; g < group; ++g) {
        float* dst = out_ptr + (seq * num_heads + kv_head * group + g) * head_dim;
        std::copy(acc + g * head_dim, acc + (g + 1) * head_dim, dst);
      }
    }
  });
}

torch::Tensor paged_decode_attention(torch::Tensor q, torch::Tensor k_cache,
                                     torch::Tensor v_cache, torch::Tensor block_tables,
                                     torch::Tensor context_lens, double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.dim() == 4, "bad ranks");
  TORCH_CHECK(q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  TORCH_CHECK(q.size(1) % k_cache.size(0) == 0, "heads not a multiple of kv heads");
  TORCH_CHECK(k_cache.size(2) == q.size(2) && v_cache.size(3) == q.size(2), "head_dim differs");
  TORCH_CHECK(k_cache.size(3) <= kMaxBlockSize, "block_size must be at most ", kMaxBlockSize);
  TORCH_CHECK(q.size(2) <= kMaxHeadDim, "head_dim must be at most ", kMaxHeadDim);
  TORCH_CHECK(q.size(1) / k_cache.size(0) <= kMaxGroup, "at most ", kMaxGroup,
              " query heads per kv head");
  TORCH_CHECK(block_tables.scalar_type() == torch::kInt64, "block_tables must be int64");
  TORCH_CHECK(context_lens.scalar_type() == torch::kInt64, "context_lens must be int64");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "cache must be contiguous");
  q = q.contiguous();
  block_tables = block_tables.contiguous();
  context_lens = context_lens.contiguous();
  auto out = torch::empty(q.sizes(), q.options().dtype(torch::kFloat32));
  const bool common = k_cache.size(3) == 16 && q.size(2) == 64;
  if (q.scalar_type() == torch::kBFloat16) {
    auto kernel = common ? decode_kernel<at::BFloat16, 16, 64> : decode_kernel<at::BFloat16, 0, 0>;
    kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out);
  } else {
    TORCH_CHECK(q.scalar_type() == torch::kFloat32, "q must be float32 or bfloat16");
    auto kernel = common ? decode_kernel<float, 16, 64> : decode_kernel<float, 0, 0>;
    kernel(q, k_cache, v_cache, block_tables, context_lens, scale, out);
  }
  return out;
}

// Stores the step's new keys and values at their slots: k and v [tokens, kv_heads, head_dim]
// (rows may be strided, as slices of the fused qkv rows), slot_blocks and slot_offsets [tokens].
void write_kv(torch::Tensor k, torch::Tensor v, torch::Tensor k_cache, torch::Tensor v_cache,
              torch::Tensor slot_blocks, torch::Tensor slot_offsets) {
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes(), "k and v must be [tokens, heads, dim]");
  TORCH_CHECK(k.stride(2) == 1 && v.stride(2) == 1, "k and v rows must be contiguous");
  TORCH_CHECK(k.scalar_type() == k_cache.scalar_type() &&
                  v.scalar_type() == v_cache.scalar_type(),
              "k, v and the cache must share a dtype");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "cache must be contiguous");
  TORCH_CHECK(k_cache.size(0) == k.size(1) && k_cache.size(2) == k.size(2) &&
                  v_cache.size(3) == k.size(2),
              "cache heads or head_dim differ from k's");
  TORCH_CHECK(slot_blocks.scalar_type() == torch::kInt64 &&
                  slot_offsets.scalar_type() == torch::kInt64 &&
                  slot_blocks.numel() == k.size(0) && slot_offsets.numel() == k.size(0),
              "slots must be int64, one per token");
  auto blocks = slot_blocks.contiguous();
  auto offsets = slot_offsets.contiguous();
  const int64_t* block_ptr = blocks.data_ptr<int64_t>();
  const int64_t* offset_ptr = offsets.data_ptr<int64_t>();
  const int64_t tokens = k.size(0), heads = k.size(1), head_dim = k.size(2);
  const int64_t cache_blocks = k_cache.size(1), block_size = k_cache.size(3);
  for (int64_t t = 0; t < tokens; ++t)
    TORCH_CHECK(block_ptr[t] >= 0 && block_ptr[t] < cache_blocks && offset_ptr[t] >= 0 &&
                    offset_ptr[t] < block_size,
                "slot out of range");
  const int64_t block_elems = head_dim * block_size;
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, k.scalar_type(), "write_kv", [&] {
    const scalar_t* k_ptr = k.data_ptr<scalar_t>();
    const scalar_t* v_ptr = v.data_ptr<scalar_t>();
    scalar_t* kc = k_cache.data_ptr<scalar_t>();
    scalar_t* vc = v_cache.data_ptr<scalar_t>();
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t block = block_ptr[t], offset = offset_ptr[t];
      for (int64_t h = 0; h < heads; ++h) {
        const scalar_t* key = k_ptr + t * k.stride(0) + h * k.stride(1);
        const scalar_t* value = v_ptr + t * v.stride(0) + h * v.stride(1);
        scalar_t* key_block = kc + (h * cache_blocks + block) * block_elems;
        scalar_t* value_row = vc + (h * cache_blocks + block) * block_elems + offset * head_dim;
        // Keys are stored dimension-major within a block: one lane per position.
        for (int64_t i = 0; i < head_dim; ++i) key_block[i * block_size + offset] = key[i];
        std::copy(value, value + head_dim, value_row);
      }
    }
  });
}
