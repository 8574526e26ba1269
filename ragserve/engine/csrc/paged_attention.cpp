// Attention over the paged KV cache for every new token of a step, prefill and decode alike.
//
// A token attends to the first `len` positions of its sequence (its own position included),
// read straight from their blocks: no gather into a padded tensor, no mask tensor. A decode
// token and a prompt token go through the same arithmetic in the same order, so a token's
// output does not depend on how its prompt was chunked, on which blocks came from the prefix
// cache, or on what else is in the batch. Greedy decoding needs that to give the same answer
// to the same request (the batch-invariant mode, see model.py).
//
// Work is split into tasks of up to kTileRows consecutive tokens of one sequence and one kv
// head, so a prompt chunk's query heads share every key and value read. Per query head the
// score of a position is one multiply-add chain over head_dim, the softmax is exact (float32,
// two passes over the scores) and values are accumulated in position order. None of this
// depends on the tile: tiling saves memory traffic and never changes a result. Scratch rows are
// 64-byte aligned with a stride of whole cache lines, so vectorized reductions over a row split
// it the same way wherever it sits in the scratch buffer.
//
// Layouts (see kv_cache.py): keys [kv_heads, blocks, head_dim, block_size], values
// [kv_heads, blocks, block_size, head_dim]. A block of keys is head_dim runs of block_size
// lanes, so a block's scores are multiply-adds over lanes, with no transpose and no
// horizontal sums.
//
// An int8 cache holds each position's key and value of a kv head as int8 with one float32 scale
// each ([kv_heads, blocks, block_size]), rounded once when written (write_kv). Scores are the
// dot products with the int8 keys times the key's scale, and each probability is multiplied by
// its value's scale before the values are summed: half the bytes of a bfloat16 cache are read,
// and the arithmetic is the same for every token, as above.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>

#include "widen.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

namespace {

constexpr int64_t kTileRows = 16;
// Multiply-adds below which a call takes no further thread: waking one costs about as much as
// this much work.
constexpr int64_t kMinTaskWork = 1 << 18;
// Floats per cache line: scratch row strides are rounded up to it.
constexpr int64_t kLineFloats = 16;

// a + b * c in one rounding where the CPU has FMA, so that every code path computes a score or
// a value sum with the same roundings.
static inline float madd(float a, float b, float c) {
#ifdef __FMA__
  return std::fma(b, c, a);
#else
  return a + b * c;
#endif
}

static inline int64_t line_stride(int64_t floats) {
  return (floats + kLineFloats - 1) / kLineFloats * kLineFloats;
}

struct FreeDeleter {
  void operator()(float* p) const { std::free(p); }
};
using Scratch = std::unique_ptr<float[], FreeDeleter>;

static Scratch scratch(int64_t floats) {
  const size_t bytes = size_t(line_stride(std::max<int64_t>(floats, 1))) * sizeof(float);
  auto* p = static_cast<float*>(std::aligned_alloc(64, bytes));
  TORCH_CHECK(p != nullptr, "out of memory for attention scratch");
  return Scratch(p);
}

// Blocks are scattered in memory, so the hardware prefetcher cannot guess the next one.
template <typename scalar_t>
static inline void prefetch(const scalar_t* ptr, int64_t elems) {
  const char* bytes = reinterpret_cast<const char*>(ptr);
  for (int64_t off = 0; off < elems * int64_t(sizeof(scalar_t)); off += 64)
    __builtin_prefetch(bytes + off);
}

#if defined(__AVX512F__)
// One 16-position block's scores for kPairs query heads at once, a vector of lanes each; every
// lane is its own multiply-add chain over head_dim, as in block_scores_any.
template <int kPairs, typename scalar_t>
static inline void block_scores16(const float* const* queries, const scalar_t* keys,
                                  int64_t head_dim, float* const* outs) {
  __m512 lanes[kPairs];
  for (int p = 0; p < kPairs; ++p) lanes[p] = _mm512_setzero_ps();
  for (int64_t i = 0; i < head_dim; ++i) {
    const __m512 key = load16(keys + i * 16);
    for (int p = 0; p < kPairs; ++p)
      lanes[p] = _mm512_fmadd_ps(_mm512_set1_ps(queries[p][i]), key, lanes[p]);
  }
  for (int p = 0; p < kPairs; ++p) _mm512_storeu_ps(outs[p], lanes[p]);
}
#elif defined(__AVX2__) && defined(__FMA__)
// The same in two vectors of eight lanes.
template <int kPairs, typename scalar_t>
static inline void block_scores16(const float* const* queries, const scalar_t* keys,
                                  int64_t head_dim, float* const* outs) {
  __m256 low[kPairs], high[kPairs];
  for (int p = 0; p < kPairs; ++p) low[p] = high[p] = _mm256_setzero_ps();
  for (int64_t i = 0; i < head_dim; ++i) {
    const __m256 keys_low = load8(keys + i * 16);
    const __m256 keys_high = load8(keys + i * 16 + 8);
    for (int p = 0; p < kPairs; ++p) {
      const __m256 qi = _mm256_broadcast_ss(queries[p] + i);
      low[p] = _mm256_fmadd_ps(qi, keys_low, low[p]);
      high[p] = _mm256_fmadd_ps(qi, keys_high, high[p]);
    }
  }
  for (int p = 0; p < kPairs; ++p) {
    _mm256_storeu_ps(outs[p], low[p]);
    _mm256_storeu_ps(outs[p] + 8, high[p]);
  }
}
#endif

// The same for a block size known only at run time.
template <typename scalar_t>
static inline void block_scores_any(const float* query, const scalar_t* keys, int64_t head_dim,
                                    int64_t block_size, float* out) {
  std::fill(out, out + block_size, 0.0f);
  for (int64_t i = 0; i < head_dim; ++i) {
    const scalar_t* run = keys + i * block_size;
    for (int64_t j = 0; j < block_size; ++j) out[j] = madd(out[j], query[i], widen(run[j]));
  }
}

// a[i] += sum over j < count of probs[j] * values[j][i], a chain over j for every i, for two
// query heads at once (a1 may be null): both read, and widen, each value vector once.
#if defined(__AVX2__) && defined(__FMA__)
// 32 consecutive dimensions of both: eight independent chains keep both multiply-add units busy
// through their four-cycle latency.
template <typename scalar_t>
static inline void accumulate_lanes(float* a0, float* a1, const float* probs0,
                                    const float* probs1, const scalar_t* values, int64_t count0,
                                    int64_t count1, int64_t head_dim) {
  __m256 acc0[4], acc1[4];
  for (int v = 0; v < 4; ++v) {
    acc0[v] = _mm256_loadu_ps(a0 + 8 * v);
    acc1[v] = a1 ? _mm256_loadu_ps(a1 + 8 * v) : _mm256_setzero_ps();
  }
  const int64_t both = std::max<int64_t>(0, std::min(count0, a1 ? count1 : 0));
  for (int64_t j = 0; j < both; ++j) {
    const __m256 weight0 = _mm256_broadcast_ss(probs0 + j);
    const __m256 weight1 = _mm256_broadcast_ss(probs1 + j);
    for (int v = 0; v < 4; ++v) {
      const __m256 value = load8(values + j * head_dim + 8 * v);
      acc0[v] = _mm256_fmadd_ps(weight0, value, acc0[v]);
      acc1[v] = _mm256_fmadd_ps(weight1, value, acc1[v]);
    }
  }
  for (int64_t j = both; j < count0; ++j) {
    const __m256 weight0 = _mm256_broadcast_ss(probs0 + j);
    for (int v = 0; v < 4; ++v)
      acc0[v] = _mm256_fmadd_ps(weight0, load8(values + j * head_dim + 8 * v), acc0[v]);
  }
  for (int64_t j = both; a1 && j < count1; ++j) {
    const __m256 weight1 = _mm256_broadcast_ss(probs1 + j);
    for (int v = 0; v < 4; ++v)
      acc1[v] = _mm256_fmadd_ps(weight1, load8(values + j * head_dim + 8 * v), acc1[v]);
  }
  for (int v = 0; v < 4; ++v) {
    _mm256_storeu_ps(a0 + 8 * v, acc0[v]);
    if (a1) _mm256_storeu_ps(a1 + 8 * v, acc1[v]);
  }
}
#endif

#if defined(__AVX512F__)
// 64 consecutive dimensions of both in sixteen-lane vectors: the same chains as
// accumulate_lanes, with half the instructions.
template <typename scalar_t>
static inline void accumulate_lanes64(float* a0, float* a1, const float* probs0,
                                      const float* probs1, const scalar_t* values,
                                      int64_t count0, int64_t count1, int64_t head_dim) {
  __m512 acc0[4], acc1[4];
  for (int v = 0; v < 4; ++v) {
    acc0[v] = _mm512_loadu_ps(a0 + 16 * v);
    acc1[v] = a1 ? _mm512_loadu_ps(a1 + 16 * v) : _mm512_setzero_ps();
  }
  const int64_t both = std::max<int64_t>(0, std::min(count0, a1 ? count1 : 0));
  for (int64_t j = 0; j < both; ++j) {
    const __m512 weight0 = _mm512_set1_ps(probs0[j]);
    const __m512 weight1 = _mm512_set1_ps(probs1[j]);
    for (int v = 0; v < 4; ++v) {
      const __m512 value = load16(values + j * head_dim + 16 * v);
      acc0[v] = _mm512_fmadd_ps(weight0, value, acc0[v]);
      acc1[v] = _mm512_fmadd_ps(weight1, value, acc1[v]);
    }
  }
  for (int64_t j = both; j < count0; ++j) {
    const __m512 weight0 = _mm512_set1_ps(probs0[j]);
    for (int v = 0; v < 4; ++v)
      acc0[v] = _mm512_fmadd_ps(weight0, load16(values + j * head_dim + 16 * v), acc0[v]);
  }
  for (int64_t j = both; a1 && j < count1; ++j) {
    const __m512 weight1 = _mm512_set1_ps(probs1[j]);
    for (int v = 0; v < 4; ++v)
      acc1[v] = _mm512_fmadd_ps(weight1, load16(values + j * head_dim + 16 * v), acc1[v]);
  }
  for (int v = 0; v < 4; ++v) {
    _mm512_storeu_ps(a0 + 16 * v, acc0[v]);
    if (a1) _mm512_storeu_ps(a1 + 16 * v, acc1[v]);
  }
}
#endif

template <typename scalar_t>
static inline void accumulate_values(float* a0, float* a1, const float* probs0,
                                     const float* probs1, const scalar_t* values, int64_t count0,
                                     int64_t count1, int64_t head_dim) {
  int64_t i = 0;
#if defined(__AVX512F__)
  for (; i + 64 <= head_dim; i += 64)
    accumulate_lanes64(a0 + i, a1 ? a1 + i : nullptr, probs0, probs1, values + i, count0,
                       count1, head_dim);
#endif
#if defined(__AVX2__) && defined(__FMA__)
  for (; i + 32 <= head_dim; i += 32)
    accumulate_lanes(a0 + i, a1 ? a1 + i : nullptr, probs0, probs1, values + i, count0, count1,
                     head_dim);
#endif
  for (; i < head_dim; ++i) {
    for (int64_t j = 0; j < count0; ++j)
      a0[i] = madd(a0[i], probs0[j], widen(values[j * head_dim + i]));
    for (int64_t j = 0; a1 && j < count1; ++j)
      a1[i] = madd(a1[i], probs1[j], widen(values[j * head_dim + i]));
  }
}

template <typename scalar_t, typename cache_t>
static void attention_kernel(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const float* k_scales,
                             const float* v_scales, const at::Tensor& block_tables,
                             const at::Tensor& token_seqs, const at::Tensor& token_lens,
                             double scale, at::Tensor& out) {
  const int64_t num_tokens = q.size(0);
  const int64_t num_heads = q.size(1);
  const int64_t head_dim = q.size(2);
  const int64_t num_kv_heads = k_cache.size(0);
  const int64_t cache_blocks = k_cache.size(1);
  const int64_t block_size = k_cache.size(3);
  const int64_t group = num_heads / num_kv_heads;
  const int64_t max_blocks = block_tables.size(1);
  const int64_t block_elems = block_size * head_dim;
  const scalar_t* q_ptr = q.data_ptr<scalar_t>();
  const cache_t* k_ptr = k_cache.data_ptr<cache_t>();
  const cache_t* v_ptr = v_cache.data_ptr<cache_t>();
  const int64_t* tables = block_tables.data_ptr<int64_t>();
  const int64_t* seqs = token_seqs.data_ptr<int64_t>();
  const int64_t* lens = token_lens.data_ptr<int64_t>();
  float* out_ptr = out.data_ptr<float>();

  // Tiles: runs of up to kTileRows consecutive tokens of one sequence.
  std::vector<int64_t> tile_starts;
  for (int64_t t = 0; t < num_tokens;) {
    tile_starts.push_back(t);
    const int64_t first = t;
    do ++t;
    while (t < num_tokens && t - first < kTileRows && seqs[t] == seqs[first]);
  }
  tile_starts.push_back(num_tokens);
  const int64_t num_tiles = int64_t(tile_starts.size()) - 1;
  // A task is a tile and a kv head; its work is its tile's longest context times its rows.
  std::vector<int64_t> tile_lens(num_tiles), tile_work(num_tiles);
  int64_t total_work = 0;
  for (int64_t tile = 0; tile < num_tiles; ++tile) {
    const int64_t first = tile_starts[tile], rows = tile_starts[tile + 1] - first;
    tile_lens[tile] = *std::max_element(lens + first, lens + first + rows);
    tile_work[tile] = tile_lens[tile] * rows;
    total_work += tile_work[tile] * num_kv_heads * group * head_dim;
  }
  int64_t max_len = 1;  // a call with no tokens still sizes its scratch
  for (const int64_t len : tile_lens) max_len = std::max(max_len, len);
  const int64_t max_pairs = kTileRows * group;
  const int64_t dim_stride = line_stride(head_dim);
  const int64_t score_stride = line_stride((max_len + block_size - 1) / block_size * block_size);

  // Threads take tasks one at a time, the largest first. A prompt chunk's later tiles attend to
  // more positions, so splitting the task list into one contiguous range per thread left one
  // thread waiting for the other through much of a prefill step.
  const int64_t num_tasks = num_tiles * num_kv_heads;
  std::vector<int64_t> order(num_tasks);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int64_t a, int64_t b) {
    return tile_work[a / num_kv_heads] > tile_work[b / num_kv_heads];
  });
  const int64_t workers =
      std::clamp<int64_t>(total_work / kMinTaskWork, 1, at::get_num_threads());
  std::atomic<int64_t> next_task{0};

  at::parallel_for(0, workers, 1, [&](int64_t, int64_t) {
    Scratch query = scratch(max_pairs * dim_stride);
    Scratch acc = scratch(max_pairs * dim_stride);
    Scratch scores = scratch(max_pairs * score_stride);
    std::vector<const float*> pair_queries(max_pairs);
    std::vector<float*> pair_outs(max_pairs);
    for (int64_t taken = next_task++; taken < num_tasks; taken = next_task++) {
      const int64_t task = order[taken];
      const int64_t tile = task / num_kv_heads;
      const int64_t kv_head = task % num_kv_heads;
      const int64_t first = tile_starts[tile];
      const int64_t rows = tile_starts[tile + 1] - first;
      const int64_t pairs = rows * group;
      const int64_t* table = tables + seqs[first] * max_blocks;
      const cache_t* k_head = k_ptr + kv_head * cache_blocks * block_elems;
      const cache_t* v_head = v_ptr + kv_head * cache_blocks * block_elems;
      // Scales of an int8 cache: one per position of each block.
      auto block_scales = [&](const float* scales, int64_t b) {
        return scales + (kv_head * cache_blocks + table[b]) * block_size;
      };
      const int64_t tile_len = tile_lens[tile];
      // Pair p is query head (kv_head * group + p % group) of token first + p / group.
      auto pair_len = [&](int64_t p) { return lens[first + p / group]; };
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t head = kv_head * group + p % group;
        const scalar_t* src = q_ptr + ((first + p / group) * num_heads + head) * head_dim;
        float* dst = query.get() + p * dim_stride;
        for (int64_t i = 0; i < head_dim; ++i) dst[i] = widen(src[i]) * float(scale);
      }

      const int64_t num_blocks = (tile_len + block_size - 1) / block_size;
      for (int64_t b = 0; b < num_blocks; ++b) {
        if (b + 1 < num_blocks) prefetch(k_head + table[b + 1] * block_elems, block_elems);
        const cache_t* keys = k_head + table[b] * block_elems;
        const int64_t base = b * block_size;
        // Query heads whose context reaches this block. Score rows hold whole blocks, so lanes
        // past a head's context are written and never read.
        int64_t active = 0;
        for (int64_t p = 0; p < pairs; ++p) {
          if (pair_len(p) <= base) continue;
          pair_queries[active] = query.get() + p * dim_stride;
          pair_outs[active] = scores.get() + p * score_stride + base;
          ++active;
        }
#if defined(__AVX2__) && defined(__FMA__)
        if (block_size == 16) {
          int64_t p = 0;
          for (; p + 4 <= active; p += 4)
            block_scores16<4>(&pair_queries[p], keys, head_dim, &pair_outs[p]);
          const int64_t rest = active - p;
          if (rest == 3) block_scores16<3>(&pair_queries[p], keys, head_dim, &pair_outs[p]);
          if (rest == 2) block_scores16<2>(&pair_queries[p], keys, head_dim, &pair_outs[p]);
          if (rest == 1) block_scores16<1>(&pair_queries[p], keys, head_dim, &pair_outs[p]);
          continue;
        }
#endif
        for (int64_t p = 0; p < active; ++p)
          block_scores_any(pair_queries[p], keys, head_dim, block_size, pair_outs[p]);
      }

      if (k_scales != nullptr) {
        for (int64_t b = 0; b < num_blocks; ++b) {
          const float* key_scales = block_scales(k_scales, b);
          for (int64_t p = 0; p < pairs; ++p) {
            float* block_row = scores.get() + p * score_stride + b * block_size;
            for (int64_t j = 0; j < block_size; ++j) block_row[j] *= key_scales[j];
          }
        }
      }
      for (int64_t p = 0; p < pairs; ++p) {
        float* row = scores.get() + p * score_stride;
        const int64_t len = pair_len(p);
        const float max_score = *std::max_element(row, row + len);
        float total = 0.0f;
        for (int64_t pos = 0; pos < len; ++pos) {
          row[pos] = std::exp(row[pos] - max_score);
          total += row[pos];
        }
        const float inv_total = 1.0f / total;
        for (int64_t pos = 0; pos < len; ++pos) row[pos] *= inv_total;
        for (int64_t b = 0; v_scales != nullptr && b * block_size < len; ++b) {
          const float* value_scales = block_scales(v_scales, b);
          const int64_t count = std::min(block_size, len - b * block_size);
          for (int64_t j = 0; j < count; ++j) row[b * block_size + j] *= value_scales[j];
        }
        std::fill(acc.get() + p * dim_stride, acc.get() + p * dim_stride + head_dim, 0.0f);
      }

      for (int64_t b = 0; b < num_blocks; ++b) {
        if (b + 1 < num_blocks) prefetch(v_head + table[b + 1] * block_elems, block_elems);
        const cache_t* values = v_head + table[b] * block_elems;
        const int64_t base = b * block_size;
        for (int64_t p = 0; p < pairs; p += 2) {
          const bool second = p + 1 < pairs;
          const int64_t next = second ? p + 1 : p;
          accumulate_values(acc.get() + p * dim_stride,
                            second ? acc.get() + next * dim_stride : nullptr,
                            scores.get() + p * score_stride + base,
                            scores.get() + next * score_stride + base, values,
                            std::min(block_size, pair_len(p) - base),
                            std::min(block_size, pair_len(next) - base), head_dim);
        }
      }
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t head = kv_head * group + p % group;
        float* dst = out_ptr + ((first + p / group) * num_heads + head) * head_dim;
        std::copy(acc.get() + p * dim_stride, acc.get() + p * dim_stride + head_dim, dst);
      }
    }
  });
}

}  // namespace

static void check_scales(const at::Tensor& k_scales, const at::Tensor& v_scales,
                         const at::Tensor& k_cache) {
  const auto expected = {k_cache.size(0), k_cache.size(1), k_cache.size(3)};
  for (const at::Tensor* scales : {&k_scales, &v_scales})
    TORCH_CHECK(scales->scalar_type() == at::kFloat && scales->is_contiguous() &&
                    scales->sizes() == at::IntArrayRef(expected),
                "scales must be contiguous float32 [kv_heads, blocks, block_size]");
}

// q [tokens, heads, head_dim]; block_tables [seqs, max_blocks] int64; token_seqs [tokens]: the
// row of each token's sequence in block_tables (a sequence's tokens are consecutive);
// token_lens [tokens]: positions each token attends (its position + 1); k_scales and v_scales
// for an int8 cache only. Returns float32 [tokens, heads, head_dim].
at::Tensor paged_attention(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache,
                           c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
                           at::Tensor block_tables, at::Tensor token_seqs, at::Tensor token_lens,
                           double scale) {
  TORCH_CHECK(q.dim() == 3 && k_cache.dim() == 4 && v_cache.dim() == 4, "bad ranks");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "k and v caches' dtypes differ");
  const bool quantized = k_cache.scalar_type() == at::kChar;
  TORCH_CHECK(quantized || q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  TORCH_CHECK(quantized == (k_scales.has_value() && v_scales.has_value()),
              "an int8 cache needs its key and value scales, a float cache none");
  if (quantized) check_scales(*k_scales, *v_scales, k_cache);
  TORCH_CHECK(q.size(1) % k_cache.size(0) == 0, "heads not a multiple of kv heads");
  TORCH_CHECK(k_cache.size(2) == q.size(2) && v_cache.size(3) == q.size(2), "head_dim differs");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.dim() == 2,
              "block_tables must be int64 [seqs, max_blocks]");
  TORCH_CHECK(token_seqs.scalar_type() == at::kLong &&
                  token_lens.scalar_type() == at::kLong && token_seqs.numel() == q.size(0) &&
                  token_lens.numel() == q.size(0),
              "token_seqs and token_lens must be int64, one per token");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "cache must be contiguous");
  q = q.contiguous();
  block_tables = block_tables.contiguous();
  token_seqs = token_seqs.contiguous();
  token_lens = token_lens.contiguous();
  const int64_t* seqs = token_seqs.data_ptr<int64_t>();
  const int64_t* lens = token_lens.data_ptr<int64_t>();
  const int64_t block_size = k_cache.size(3);
  for (int64_t t = 0; t < q.size(0); ++t)
    TORCH_CHECK(seqs[t] >= 0 && seqs[t] < block_tables.size(0) && lens[t] >= 1 &&
                    lens[t] <= block_tables.size(1) * block_size,
                "token ", t, ": sequence row or length out of range");
  auto out = at::empty(q.sizes(), q.options().dtype(at::kFloat));
  TORCH_CHECK(q.scalar_type() == at::kBFloat16 || q.scalar_type() == at::kFloat,
              "q must be float32 or bfloat16");
  const bool bf16 = q.scalar_type() == at::kBFloat16;
  if (quantized) {
    const float* key_scales = k_scales->data_ptr<float>();
    const float* value_scales = v_scales->data_ptr<float>();
    if (bf16)
      attention_kernel<at::BFloat16, int8_t>(q, k_cache, v_cache, key_scales, value_scales,
                                             block_tables, token_seqs, token_lens, scale, out);
    else
      attention_kernel<float, int8_t>(q, k_cache, v_cache, key_scales, value_scales,
                                      block_tables, token_seqs, token_lens, scale, out);
  } else if (bf16) {
    attention_kernel<at::BFloat16, at::BFloat16>(q, k_cache, v_cache, nullptr, nullptr,
                                                 block_tables, token_seqs, token_lens, scale, out);
  } else {
    attention_kernel<float, float>(q, k_cache, v_cache, nullptr, nullptr, block_tables,
                                   token_seqs, token_lens, scale, out);
  }
  return out;
}

// One position's key or value of one kv head in int8: rounded to the nearest multiple of
// scale = max |x| / 127 (all zeros: scale 1).
template <typename scalar_t>
static inline void quantize_row(const scalar_t* x, int64_t n, int64_t stride, int8_t* out,
                                float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(widen(x[i])));
  const float step = amax > 0.0f ? amax / 127.0f : 1.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::nearbyint(widen(x[i]) / step);
    out[i * stride] = int8_t(std::clamp(q, -127.0f, 127.0f));
  }
  *scale = step;
}

// Stores the step's new keys and values at their slots: k and v [tokens, kv_heads, head_dim]
// (rows may be strided, as slices of the fused qkv rows), slot_blocks and slot_offsets [tokens].
// An int8 cache (k_scales and v_scales given) gets them rounded, with their scales.
void write_kv(at::Tensor k, at::Tensor v, at::Tensor k_cache, at::Tensor v_cache,
              c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
              at::Tensor slot_blocks, at::Tensor slot_offsets) {
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes(), "k and v must be [tokens, heads, dim]");
  TORCH_CHECK(k.stride(2) == 1 && v.stride(2) == 1, "k and v rows must be contiguous");
  const bool quantized = k_cache.scalar_type() == at::kChar;
  TORCH_CHECK(k.scalar_type() == v.scalar_type() && v_cache.scalar_type() == k_cache.scalar_type(),
              "k and v, and their caches, must share a dtype");
  TORCH_CHECK(quantized || k.scalar_type() == k_cache.scalar_type(),
              "k, v and a float cache must share a dtype");
  TORCH_CHECK(quantized == (k_scales.has_value() && v_scales.has_value()),
              "an int8 cache needs its key and value scales, a float cache none");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "cache must be contiguous");
  TORCH_CHECK(k_cache.size(0) == k.size(1) && k_cache.size(2) == k.size(2) &&
                  v_cache.size(3) == k.size(2),
              "cache heads or head_dim differ from k's");
  if (quantized) check_scales(*k_scales, *v_scales, k_cache);
  TORCH_CHECK(slot_blocks.scalar_type() == at::kLong &&
                  slot_offsets.scalar_type() == at::kLong &&
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
  TORCH_CHECK(k.scalar_type() == at::kFloat || k.scalar_type() == at::kBFloat16,
              "k and v must be float32 or bfloat16");
  int8_t* k_int8 = quantized ? k_cache.data_ptr<int8_t>() : nullptr;
  int8_t* v_int8 = quantized ? v_cache.data_ptr<int8_t>() : nullptr;
  float* key_scales = quantized ? k_scales->data_ptr<float>() : nullptr;
  float* value_scales = quantized ? v_scales->data_ptr<float>() : nullptr;
  auto store = [&](auto zero) {
    using scalar_t = decltype(zero);
    const scalar_t* k_ptr = k.data_ptr<scalar_t>();
    const scalar_t* v_ptr = v.data_ptr<scalar_t>();
    scalar_t* kc = quantized ? nullptr : k_cache.data_ptr<scalar_t>();
    scalar_t* vc = quantized ? nullptr : v_cache.data_ptr<scalar_t>();
    for (int64_t t = 0; t < tokens; ++t) {
      const int64_t block = block_ptr[t], offset = offset_ptr[t];
      for (int64_t h = 0; h < heads; ++h) {
        const scalar_t* key = k_ptr + t * k.stride(0) + h * k.stride(1);
        const scalar_t* value = v_ptr + t * v.stride(0) + h * v.stride(1);
        const int64_t block_index = h * cache_blocks + block;
        const int64_t key_at = block_index * block_elems + offset;
        const int64_t value_at = block_index * block_elems + offset * head_dim;
        // Keys are stored dimension-major within a block: one lane per position.
        if (quantized) {
          const int64_t scale_at = block_index * block_size + offset;
          quantize_row(key, head_dim, block_size, k_int8 + key_at, key_scales + scale_at);
          quantize_row(value, head_dim, 1, v_int8 + value_at, value_scales + scale_at);
          continue;
        }
        for (int64_t i = 0; i < head_dim; ++i) kc[key_at + i * block_size] = key[i];
        std::copy(value, value + head_dim, vc + value_at);
      }
    }
  };
  if (k.scalar_type() == at::kBFloat16)
    store(at::BFloat16());
  else
    store(float());
}
