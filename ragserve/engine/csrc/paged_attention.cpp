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
// Layouts (see kv_cache.py): keys [kv_heads, blocks, head_dim / group, block_size, group],
// values [kv_heads, blocks, block_size, head_dim]. A float cache's block of keys is head_dim runs
// of block_size lanes (group 1), so a block's scores are multiply-adds over lanes, with no
// transpose and no horizontal sums.
//
// An int8 cache holds each position's key and value of a kv head as int8 with one float32 scale
// each ([kv_heads, blocks, block_size]), rounded once when written (write_kv). The query head is
// rounded the same way when read, so a score is an integer dot product times the two scales:
// exact, hence the same on every path and in every order, and with VNNI (vpdpbusd) 64
// multiply-adds an instruction, whose lanes take four bytes each: hence keys in groups of four
// dimensions per position. Each probability is multiplied by its value's scale before the
// values are summed: half the bytes of a bfloat16 cache are read, and the arithmetic is the same
// for every token, as above.
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
#include <type_traits>
#include <vector>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#endif

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#define LANES16 1
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

// A key, value or query row of one head in int8: x * (127 / max |x|) rounded to the nearest
// integer (ties to even), with scale max |x| / 127 (all zeros: 0 and scale 1). One division
// and a product per element, as quantize_kv in kernels.py computes them: a quotient
// x / scale would be left to -ffast-math to compute as a product with its reciprocal, which
// rounds the many exact ties of bfloat16 rows (x = max |x| / 2) either way.
template <typename scalar_t>
static inline void quantize_row(const scalar_t* x, int64_t n, int8_t* out, float* scale) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(widen(x[i])));
  const float inverse = amax > 0.0f ? 127.0f / amax : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float q = std::nearbyint(widen(x[i]) * inverse);
    out[i] = int8_t(std::clamp(q, -127.0f, 127.0f));
  }
  *scale = amax > 0.0f ? amax / 127.0f : 1.0f;
}

// Blocks scored at once: each block's lanes are chains of their own, and a decode token's three
// query heads alone are three chains, too few to cover the multiply-add latency. Query heads
// whose values are summed at once, and value dimensions per pass (sixteen each). As many as the
// registers hold.
#if defined(__AVX512F__)
constexpr int kScoreBlocks = 4;
constexpr int kValueHeads = 4;
constexpr int kValueChunks = 4;
#else
constexpr int kScoreBlocks = 1;
constexpr int kValueHeads = 2;
constexpr int kValueChunks = 2;
#endif

#if defined(LANES16)
// Sixteen float32 lanes: one register with AVX-512, two with AVX2, so the loops below are
// written once for both.
struct Lanes16 {
#if defined(__AVX512F__)
  __m512 v;
  static Lanes16 zero() { return {_mm512_setzero_ps()}; }
  template <typename scalar_t>
  static Lanes16 load(const scalar_t* p) { return {load16(p)}; }
  // this + weight * x, per lane in one rounding.
  Lanes16 fmadd(__m512 weight, const Lanes16& x) const {
    return {_mm512_fmadd_ps(weight, x.v, v)};
  }
  static __m512 broadcast(float x) { return _mm512_set1_ps(x); }
  void store(float* p) const { _mm512_storeu_ps(p, v); }
#else
  __m256 low, high;
  static Lanes16 zero() { return {_mm256_setzero_ps(), _mm256_setzero_ps()}; }
  template <typename scalar_t>
  static Lanes16 load(const scalar_t* p) { return {load8(p), load8(p + 8)}; }
  Lanes16 fmadd(__m256 weight, const Lanes16& x) const {
    return {_mm256_fmadd_ps(weight, x.low, low), _mm256_fmadd_ps(weight, x.high, high)};
  }
  static __m256 broadcast(float x) { return _mm256_set1_ps(x); }
  void store(float* p) const {
    _mm256_storeu_ps(p, low);
    _mm256_storeu_ps(p + 8, high);
  }
#endif
};

// The scores of kPairs query heads against kScoreBlocks 16-position blocks of keys (keys[b]),
// into outs[p] + 16 b: every lane is its own multiply-add chain over head_dim, as in
// block_scores_any.
template <int kPairs, int kBlocks, typename scalar_t>
static inline void block_scores16(const float* const* queries, const scalar_t* const* keys,
                                  const scalar_t* const* next, int64_t head_dim,
                                  float* const* outs) {
  // Elements per cache line of keys: each step below reads 16 of every block.
  constexpr int64_t kLineSteps = 64 / (16 * sizeof(scalar_t));
  // Pointers copied into locals, which the compiler keeps in registers through the loop.
  const float* query[kPairs];
  const scalar_t *block[kBlocks], *ahead[kBlocks];
  Lanes16 lanes[kPairs][kBlocks];
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p) {
    query[p] = queries[p];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) lanes[p][b] = Lanes16::zero();
  }
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) {
    block[b] = keys[b];
    ahead[b] = next != nullptr ? next[b] : nullptr;
  }
  for (int64_t i = 0; i < head_dim; ++i) {
    // The next blocks' lines, a line per block every kLineSteps steps: spread out, the prefetches
    // never fill the queue of misses the loads wait behind.
    if (next != nullptr && i % kLineSteps == 0)
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b) __builtin_prefetch(ahead[b] + i * 16);
    Lanes16 key[kBlocks];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) key[b] = Lanes16::load(block[b] + i * 16);
#pragma GCC unroll 16
    for (int p = 0; p < kPairs; ++p) {
      const auto qi = Lanes16::broadcast(query[p][i]);
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b) lanes[p][b] = lanes[p][b].fmadd(qi, key[b]);
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) lanes[p][b].store(outs[p] + 16 * b);
}

// out[h][i] = sum over positions j < lens[h] of probs[h][j] * value_j[i], for kHeads query heads
// and dimensions [dim, dim + 16 kChunks): one chain over j per dimension, in position order,
// through every block of the context. The heads share every value read and widened.
// blocks[num_blocks] exists (padding), to be fetched ahead.
template <int kHeads, int kChunks, typename scalar_t>
static inline void accumulate_heads(float* const* outs, const float* const* probs,
                                    const int64_t* lens, const scalar_t* const* blocks,
                                    int64_t num_blocks, int64_t block_size, int64_t head_dim,
                                    int64_t dim) {
  const float* weights[kHeads];  // locals, kept in registers
  Lanes16 acc[kHeads][kChunks];
#pragma GCC unroll 16
  for (int h = 0; h < kHeads; ++h) {
    weights[h] = probs[h];
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) acc[h][c] = Lanes16::zero();
  }
  for (int64_t b = 0; b < num_blocks; ++b) {
    const scalar_t* values = blocks[b] + dim;
    const int64_t base = b * block_size;
    int64_t counts[kHeads];
    int64_t common = block_size;
#pragma GCC unroll 16
    for (int h = 0; h < kHeads; ++h) {
      counts[h] = std::clamp<int64_t>(lens[h] - base, 0, block_size);
      common = std::min(common, counts[h]);
    }
    // The first pass over the dimensions fetches the next block's whole rows ahead: later passes
    // find them in cache instead of sweeping memory again for the lines between.
    const char* next = reinterpret_cast<const char*>(blocks[b + 1]);
    const int64_t row_bytes = dim == 0 ? head_dim * int64_t(sizeof(scalar_t)) : 0;
    for (int64_t j = 0; j < common; ++j) {
      for (int64_t line = 0; line < row_bytes; line += 64)
        __builtin_prefetch(next + j * row_bytes + line);
      Lanes16 value[kChunks];
#pragma GCC unroll 16
      for (int c = 0; c < kChunks; ++c)
        value[c] = Lanes16::load(values + j * head_dim + 16 * c);
#pragma GCC unroll 16
      for (int h = 0; h < kHeads; ++h) {
        const auto weight = Lanes16::broadcast(weights[h][base + j]);
#pragma GCC unroll 16
        for (int c = 0; c < kChunks; ++c) acc[h][c] = acc[h][c].fmadd(weight, value[c]);
      }
    }
#pragma GCC unroll 16
    for (int h = 0; h < kHeads; ++h)
      for (int64_t j = common; j < counts[h]; ++j) {
        const auto weight = Lanes16::broadcast(weights[h][base + j]);
#pragma GCC unroll 16
        for (int c = 0; c < kChunks; ++c)
          acc[h][c] = acc[h][c].fmadd(weight, Lanes16::load(values + j * head_dim + 16 * c));
      }
  }
#pragma GCC unroll 16
  for (int h = 0; h < kHeads; ++h)
#pragma GCC unroll 16
    for (int c = 0; c < kChunks; ++c) acc[h][c].store(outs[h] + dim + 16 * c);
}
#endif

// The same chains one dimension at a time, for dimensions [dim, head_dim) of one head.
template <typename scalar_t>
static inline void accumulate_any(float* out, const float* probs, int64_t len,
                                  const scalar_t* const* blocks, int64_t num_blocks,
                                  int64_t block_size, int64_t head_dim, int64_t dim) {
  for (int64_t i = dim; i < head_dim; ++i) {
    float sum = 0.0f;
    for (int64_t b = 0; b < num_blocks; ++b) {
      const int64_t count = std::clamp<int64_t>(len - b * block_size, 0, block_size);
      for (int64_t j = 0; j < count; ++j)
        sum = madd(sum, probs[b * block_size + j], widen(blocks[b][j * head_dim + i]));
    }
    out[i] = sum;
  }
}

// The block size known only at run time.
template <typename scalar_t>
static inline void block_scores_any(const float* query, const scalar_t* keys, int64_t head_dim,
                                    int64_t block_size, float* out) {
  std::fill(out, out + block_size, 0.0f);
  for (int64_t i = 0; i < head_dim; ++i) {
    const scalar_t* run = keys + i * block_size;
    for (int64_t j = 0; j < block_size; ++j) out[j] = madd(out[j], query[i], widen(run[j]));
  }
}

// An int8 cache's integer scores: query (int8 [head_dim]) against the block_size positions of
// a block of keys in groups of four dimensions.
static inline void int8_scores_any(const int8_t* query, const int8_t* keys, int64_t head_dim,
                                   int64_t block_size, float* out) {
  for (int64_t j = 0; j < block_size; ++j) {
    int32_t sum = 0;
    for (int64_t i = 0; i < head_dim; ++i)
      sum += int32_t(query[i]) * int32_t(keys[((i / 4) * block_size + j) * 4 + i % 4]);
    out[j] = float(sum);
  }
}

#if defined(__AVX512VNNI__) && defined(__AVX512BW__)
// The same for kPairs queries against kBlocks 16-position blocks, into outs[p] + 16 b. vpdpbusd
// multiplies unsigned bytes by signed ones: each query byte goes in as q + 128, and 128 times the
// position's key sum comes off after. The first call of a block's pairs (kSums) takes the sums
// into sums[16 kBlocks]; the others read them.
template <int kPairs, int kBlocks, bool kSums>
static inline void int8_scores16(const int8_t* const* queries, const int8_t* const* keys,
                                 const int8_t* const* next, int64_t head_dim, int32_t* sums,
                                 float* const* outs) {
  const __m512i offset = _mm512_set1_epi8(char(0x80)), ones = _mm512_set1_epi8(1);
  const int8_t* query[kPairs];
  const int8_t *block[kBlocks], *ahead[kBlocks];
  __m512i acc[kPairs][kBlocks], total[kBlocks];
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p) {
    query[p] = queries[p];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) acc[p][b] = _mm512_setzero_si512();
  }
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) {
    block[b] = keys[b];
    ahead[b] = next != nullptr ? next[b] : nullptr;
    total[b] = _mm512_setzero_si512();
  }
  // Each step reads a line of every block: four dimensions of its sixteen positions.
  for (int64_t i = 0; i < head_dim / 4; ++i) {
    __m512i key[kBlocks];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) {
      if (next != nullptr) __builtin_prefetch(ahead[b] + 64 * i);
      key[b] = _mm512_loadu_si512(block[b] + 64 * i);
      if (kSums) total[b] = _mm512_dpbusd_epi32(total[b], ones, key[b]);
    }
#pragma GCC unroll 16
    for (int p = 0; p < kPairs; ++p) {
      int32_t quad;
      std::memcpy(&quad, query[p] + 4 * i, sizeof(quad));
      const __m512i q = _mm512_xor_si512(_mm512_set1_epi32(quad), offset);
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b) acc[p][b] = _mm512_dpbusd_epi32(acc[p][b], q, key[b]);
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) {
    if (kSums) _mm512_storeu_si512(sums + 16 * b, total[b]);
    const __m512i correction = _mm512_slli_epi32(_mm512_loadu_si512(sums + 16 * b), 7);
#pragma GCC unroll 16
    for (int p = 0; p < kPairs; ++p)
      _mm512_storeu_ps(outs[p] + 16 * b,
                       _mm512_cvtepi32_ps(_mm512_sub_epi32(acc[p][b], correction)));
  }
}
#elif defined(__AVX2__)
// Without VNNI: |k| times q with k's sign (vpmaddubsw, whose pair sums, at most 2 * 127 * 127,
// fit in 16 bits), each lane's two pairs then summed into 32 bits (vpmaddwd by ones). The same
// integers as above, so the same scores.
template <int kPairs, int kBlocks, bool kSums>
static inline void int8_scores16(const int8_t* const* queries, const int8_t* const* keys,
                                 const int8_t* const* next, int64_t head_dim, int32_t*,
                                 float* const* outs) {
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* query[kPairs];
  __m256i acc[kPairs][kBlocks][2];
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p) {
    query[p] = queries[p];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) acc[p][b][0] = acc[p][b][1] = _mm256_setzero_si256();
  }
  for (int64_t i = 0; i < head_dim / 4; ++i) {
    __m256i key[kBlocks][2], magnitude[kBlocks][2];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) {
      if (next != nullptr) __builtin_prefetch(next[b] + 64 * i);
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        key[b][h] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(keys[b] + 64 * i + 32 * h));
        magnitude[b][h] = _mm256_abs_epi8(key[b][h]);
      }
    }
#pragma GCC unroll 16
    for (int p = 0; p < kPairs; ++p) {
      int32_t quad;
      std::memcpy(&quad, query[p] + 4 * i, sizeof(quad));
      const __m256i q = _mm256_set1_epi32(quad);
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b)
#pragma GCC unroll 2
        for (int h = 0; h < 2; ++h) {
          const __m256i signed_q = _mm256_sign_epi8(q, key[b][h]);
          const __m256i pairs = _mm256_maddubs_epi16(magnitude[b][h], signed_q);
          acc[p][b][h] = _mm256_add_epi32(acc[p][b][h], _mm256_madd_epi16(pairs, ones));
        }
    }
  }
#pragma GCC unroll 16
  for (int p = 0; p < kPairs; ++p)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h)
        _mm256_storeu_ps(outs[p] + 16 * b + 8 * h, _mm256_cvtepi32_ps(acc[p][b][h]));
}
#endif

#if defined(LANES16)
// block_scores16 (int8_scores16 for an int8 cache) over every pair, up to four at a time;
// keys[kBlocks, 2 kBlocks) are the blocks scored next, fetched ahead by the first pairs.
template <int kBlocks, typename query_t, typename cache_t>
static inline void score_pairs(const query_t* const* queries, const cache_t* const* keys,
                               int64_t pairs, int64_t head_dim, float* const* rows,
                               int64_t base) {
  float* outs[4];
  alignas(64) int32_t key_sums[16 * kBlocks];
  for (int64_t p = 0; p < pairs; p += 4) {
    const int64_t count = std::min<int64_t>(4, pairs - p);
    const cache_t* const* next = p == 0 ? keys + kBlocks : nullptr;
    for (int64_t i = 0; i < count; ++i) outs[i] = rows[p + i] + base;
    auto run = [&](auto size) {
      constexpr int kPairs = decltype(size)::value;
      if constexpr (std::is_same_v<cache_t, int8_t>) {
        if (p == 0)
          int8_scores16<kPairs, kBlocks, true>(queries + p, keys, next, head_dim, key_sums, outs);
        else
          int8_scores16<kPairs, kBlocks, false>(queries + p, keys, next, head_dim, key_sums, outs);
      } else {
        block_scores16<kPairs, kBlocks>(queries + p, keys, next, head_dim, outs);
      }
    };
    if (count == 4) run(std::integral_constant<int, 4>());
    if (count == 3) run(std::integral_constant<int, 3>());
    if (count == 2) run(std::integral_constant<int, 2>());
    if (count == 1) run(std::integral_constant<int, 1>());
  }
}

// accumulate_heads over every pair, kValueHeads at a time.
template <int kChunks, typename scalar_t>
static inline void value_pairs(float* const* outs, const float* const* probs,
                               const int64_t* lens, int64_t pairs,
                               const scalar_t* const* blocks, int64_t num_blocks,
                               int64_t block_size, int64_t head_dim, int64_t dim) {
  for (int64_t p = 0; p < pairs; p += kValueHeads) {
    const int64_t count = std::min<int64_t>(kValueHeads, pairs - p);
    auto run = [&](auto heads) {
      accumulate_heads<decltype(heads)::value, kChunks>(outs + p, probs + p, lens + p, blocks,
                                                        num_blocks, block_size, head_dim, dim);
    };
    if (count == 1) run(std::integral_constant<int, 1>());
    if (count == 2) run(std::integral_constant<int, 2>());
#if defined(__AVX512F__)
    if (count == 3) run(std::integral_constant<int, 3>());
    if (count == 4) run(std::integral_constant<int, 4>());
#endif
  }
}
#endif

template <typename scalar_t, typename cache_t>
static void attention_kernel(const at::Tensor& q, const at::Tensor& k_cache,
                             const at::Tensor& v_cache, const float* k_scales,
                             const float* v_scales, const at::Tensor& block_tables,
                             const at::Tensor& token_seqs, const at::Tensor& token_lens,
                             double scale, at::Tensor& out) {
  const int64_t num_tokens = q.size(0);
  const int64_t q_row = q.stride(0);
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
  // A float32 output is written in place; a bfloat16 one (q's dtype) gets each task's rows in
  // float32 scratch first, then rounded once, as a float32 output converted afterwards would be.
  const bool float_out = out.scalar_type() == at::kFloat;
  float* out_ptr = float_out ? out.data_ptr<float>() : nullptr;
  at::BFloat16* narrow_out = float_out ? nullptr : out.data_ptr<at::BFloat16>();

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
    // An int8 cache's queries, rounded (rows of dim_stride bytes), and their scales.
    constexpr bool kRounded = std::is_same_v<cache_t, int8_t>;
    Scratch rounded = scratch(kRounded ? max_pairs * dim_stride / 4 : 0);
    int8_t* const rounded_rows = reinterpret_cast<int8_t*>(rounded.get());
    std::vector<const int8_t*> pair_rounded(max_pairs);
    std::vector<float> pair_query_scales(max_pairs);
    Scratch scores = scratch(max_pairs * score_stride);
    Scratch outs = scratch(float_out ? 0 : max_pairs * dim_stride);
    std::vector<const float*> pair_queries(max_pairs), pair_probs(max_pairs);
    std::vector<float*> pair_rows(max_pairs), pair_outs(max_pairs);
    std::vector<int64_t> pair_lens(max_pairs);
    // Padded with the last block, so that the blocks after any block's exist to be fetched ahead.
    std::vector<const cache_t*> key_blocks(max_blocks + 2 * kScoreBlocks),
        value_blocks(max_blocks + 1);
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
      const int64_t num_blocks = (tile_lens[tile] + block_size - 1) / block_size;
      for (int64_t b = 0; b < num_blocks + 2 * kScoreBlocks; ++b) {
        const int64_t block = table[std::min(b, num_blocks - 1)];
        key_blocks[b] = k_head + block * block_elems;
        if (b <= num_blocks) value_blocks[b] = v_head + block * block_elems;
      }
      // An int8 cache's scales: a line per block, read after the scores; fetched now.
      for (int64_t b = 0; k_scales != nullptr && b < num_blocks; ++b) {
        __builtin_prefetch(block_scales(k_scales, b));
        __builtin_prefetch(block_scales(v_scales, b));
      }
      // Pair p is query head (kv_head * group + p % group) of token first + p / group.
      for (int64_t p = 0; p < pairs; ++p) {
        const int64_t token = first + p / group, head = kv_head * group + p % group;
        const scalar_t* src = q_ptr + token * q_row + head * head_dim;
        float* dst = query.get() + p * dim_stride;
        for (int64_t i = 0; i < head_dim; ++i) dst[i] = widen(src[i]) * float(scale);
        if constexpr (kRounded) {
          int8_t* row = rounded_rows + p * dim_stride;
          quantize_row(dst, head_dim, row, &pair_query_scales[p]);
          pair_rounded[p] = row;
        }
        pair_queries[p] = dst;
        pair_rows[p] = scores.get() + p * score_stride;
        pair_probs[p] = pair_rows[p];
        pair_outs[p] = float_out ? out_ptr + (token * num_heads + head) * head_dim
                                 : outs.get() + p * dim_stride;
        pair_lens[p] = lens[token];
      }

      // Scores of every pair for every block of the tile: score rows hold whole blocks, and a
      // pair's lanes past its own context are written and never read.
      auto score = [&](auto queries) {
#if defined(LANES16)
        if (block_size == 16) {
          int64_t b = 0;
          for (; b + kScoreBlocks <= num_blocks; b += kScoreBlocks)
            score_pairs<kScoreBlocks>(queries, &key_blocks[b], pairs, head_dim, pair_rows.data(),
                                      16 * b);
          for (; b < num_blocks; ++b)
            score_pairs<1>(queries, &key_blocks[b], pairs, head_dim, pair_rows.data(), 16 * b);
          return;
        }
#endif
        for (int64_t b = 0; b < num_blocks; ++b)
          for (int64_t p = 0; p < pairs; ++p) {
            float* out = pair_rows[p] + b * block_size;
            if constexpr (std::is_same_v<cache_t, int8_t>)
              int8_scores_any(queries[p], key_blocks[b], head_dim, block_size, out);
            else
              block_scores_any(queries[p], key_blocks[b], head_dim, block_size, out);
          }
      };
      if constexpr (std::is_same_v<cache_t, int8_t>)
        score(pair_rounded.data());
      else
        score(pair_queries.data());

      for (int64_t p = 0; p < pairs; ++p) {
        float* row = pair_rows[p];
        const int64_t len = pair_lens[p];
        for (int64_t b = 0; k_scales != nullptr && b * block_size < len; ++b) {
          const float* key_scales = block_scales(k_scales, b);
          const float query_scale = pair_query_scales[p];
          for (int64_t j = 0; j < block_size; ++j)
            row[b * block_size + j] *= query_scale * key_scales[j];
        }
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
      }

      int64_t dim = 0;
#if defined(LANES16)
      for (; dim + 16 * kValueChunks <= head_dim; dim += 16 * kValueChunks)
        value_pairs<kValueChunks>(pair_outs.data(), pair_probs.data(), pair_lens.data(), pairs,
                                  value_blocks.data(), num_blocks, block_size, head_dim, dim);
      for (; dim + 16 <= head_dim; dim += 16)
        value_pairs<1>(pair_outs.data(), pair_probs.data(), pair_lens.data(), pairs,
                       value_blocks.data(), num_blocks, block_size, head_dim, dim);
#endif
      for (int64_t p = 0; dim < head_dim && p < pairs; ++p)
        accumulate_any(pair_outs[p], pair_probs[p], pair_lens[p], value_blocks.data(), num_blocks,
                       block_size, head_dim, dim);
      for (int64_t p = 0; !float_out && p < pairs; ++p) {
        const int64_t token = first + p / group, head = kv_head * group + p % group;
        std::copy(pair_outs[p], pair_outs[p] + head_dim,
                  narrow_out + (token * num_heads + head) * head_dim);
      }
    }
  });
}

}  // namespace

// Keys [kv_heads, blocks, head_dim / group, block_size, group] (group 4 in an int8 cache, 1 in
// a float one) and values [kv_heads, blocks, block_size, head_dim], contiguous, of one dtype.
static void check_cache(const at::Tensor& k_cache, const at::Tensor& v_cache, int64_t head_dim) {
  TORCH_CHECK(k_cache.dim() == 5 && v_cache.dim() == 4, "bad cache ranks");
  TORCH_CHECK(k_cache.scalar_type() == v_cache.scalar_type(), "k and v caches' dtypes differ");
  const int64_t group = k_cache.scalar_type() == at::kChar ? 4 : 1;
  TORCH_CHECK(k_cache.size(4) == group, "keys must come in groups of ", group, " dimensions");
  TORCH_CHECK(k_cache.size(2) * group == head_dim && v_cache.size(3) == head_dim,
              "cache head_dim differs");
  TORCH_CHECK(k_cache.size(0) == v_cache.size(0) && k_cache.size(1) == v_cache.size(1) &&
                  k_cache.size(3) == v_cache.size(2),
              "k and v caches' heads, blocks or block sizes differ");
  TORCH_CHECK(k_cache.is_contiguous() && v_cache.is_contiguous(), "cache must be contiguous");
}

static void check_scales(const at::Tensor& k_scales, const at::Tensor& v_scales,
                         const at::Tensor& k_cache) {
  const auto expected = {k_cache.size(0), k_cache.size(1), k_cache.size(3)};
  for (const at::Tensor* scales : {&k_scales, &v_scales})
    TORCH_CHECK(scales->scalar_type() == at::kFloat && scales->is_contiguous() &&
                    scales->sizes() == at::IntArrayRef(expected),
                "scales must be contiguous float32 [kv_heads, blocks, block_size]");
}

// q [tokens, heads, head_dim] (rows may be strided, as slices of the fused qkv rows);
// block_tables [seqs, max_blocks] int64; token_seqs [tokens]: the row of each token's sequence
// in block_tables (a sequence's tokens are consecutive); token_lens [tokens]: positions each
// token attends (its position + 1); k_scales and v_scales for an int8 cache only. Returns
// [tokens, heads, head_dim] in out_dtype: float32, or q's dtype (rounded once from float32).
at::Tensor paged_attention(at::Tensor q, at::Tensor k_cache, at::Tensor v_cache,
                           c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
                           at::Tensor block_tables, at::Tensor token_seqs, at::Tensor token_lens,
                           double scale, at::ScalarType out_dtype) {
  TORCH_CHECK(q.dim() == 3, "q must be [tokens, heads, head_dim]");
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == q.scalar_type(),
              "the output must be float32 or q's dtype");
  check_cache(k_cache, v_cache, q.size(2));
  const bool quantized = k_cache.scalar_type() == at::kChar;
  TORCH_CHECK(quantized || q.scalar_type() == k_cache.scalar_type(), "q and cache dtypes differ");
  TORCH_CHECK(quantized == (k_scales.has_value() && v_scales.has_value()),
              "an int8 cache needs its key and value scales, a float cache none");
  if (quantized) check_scales(*k_scales, *v_scales, k_cache);
  TORCH_CHECK(q.size(1) % k_cache.size(0) == 0, "heads not a multiple of kv heads");
  TORCH_CHECK(block_tables.scalar_type() == at::kLong && block_tables.dim() == 2,
              "block_tables must be int64 [seqs, max_blocks]");
  TORCH_CHECK(token_seqs.scalar_type() == at::kLong &&
                  token_lens.scalar_type() == at::kLong && token_seqs.numel() == q.size(0) &&
                  token_lens.numel() == q.size(0),
              "token_seqs and token_lens must be int64, one per token");
  if (q.stride(2) != 1 || q.stride(1) != q.size(2)) q = q.contiguous();
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
  auto out = at::empty(q.sizes(), q.options().dtype(out_dtype));
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

// Stores the step's new keys and values at their slots: k and v [tokens, kv_heads, head_dim]
// (rows may be strided, as slices of the fused qkv rows), slot_blocks and slot_offsets [tokens].
// An int8 cache (k_scales and v_scales given) gets them rounded, with their scales.
void write_kv(at::Tensor k, at::Tensor v, at::Tensor k_cache, at::Tensor v_cache,
              c10::optional<at::Tensor> k_scales, c10::optional<at::Tensor> v_scales,
              at::Tensor slot_blocks, at::Tensor slot_offsets) {
  TORCH_CHECK(k.dim() == 3 && v.sizes() == k.sizes(), "k and v must be [tokens, heads, dim]");
  TORCH_CHECK(k.stride(2) == 1 && v.stride(2) == 1, "k and v rows must be contiguous");
  const bool quantized = k_cache.scalar_type() == at::kChar;
  check_cache(k_cache, v_cache, k.size(2));
  TORCH_CHECK(k.scalar_type() == v.scalar_type(), "k and v must share a dtype");
  TORCH_CHECK(quantized || k.scalar_type() == k_cache.scalar_type(),
              "k, v and a float cache must share a dtype");
  TORCH_CHECK(quantized == (k_scales.has_value() && v_scales.has_value()),
              "an int8 cache needs its key and value scales, a float cache none");
  TORCH_CHECK(k_cache.size(0) == k.size(1), "cache heads differ from k's");
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
  const int64_t block_elems = head_dim * block_size, group = k_cache.size(4);
  // The key at `offset` into its block: dimensions i..i+group go to their group's run.
  auto store_key = [&](const auto* key, auto* block, int64_t offset) {
    for (int64_t i = 0; i < head_dim; i += group)
      for (int64_t d = 0; d < group; ++d) block[i * block_size + offset * group + d] = key[i + d];
  };
  TORCH_CHECK(k.scalar_type() == at::kFloat || k.scalar_type() == at::kBFloat16,
              "k and v must be float32 or bfloat16");
  int8_t* k_int8 = quantized ? k_cache.data_ptr<int8_t>() : nullptr;
  int8_t* v_int8 = quantized ? v_cache.data_ptr<int8_t>() : nullptr;
  float* key_scales = quantized ? k_scales->data_ptr<float>() : nullptr;
  float* value_scales = quantized ? v_scales->data_ptr<float>() : nullptr;
  std::vector<int8_t> rounded_key(head_dim);
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
        const int64_t key_at = block_index * block_elems;
        const int64_t value_at = block_index * block_elems + offset * head_dim;
        if (quantized) {
          const int64_t scale_at = block_index * block_size + offset;
          quantize_row(key, head_dim, rounded_key.data(), key_scales + scale_at);
          store_key(rounded_key.data(), k_int8 + key_at, offset);
          quantize_row(value, head_dim, v_int8 + value_at, value_scales + scale_at);
          continue;
        }
        store_key(key, kc + key_at, offset);
        std::copy(value, value + head_dim, vc + value_at);
      }
    }
  };
  if (k.scalar_type() == at::kBFloat16)
    store(at::BFloat16());
  else
    store(float());
}

// A layer's attention in one call: qkv [tokens, (heads + 2 kv_heads) * head_dim], RoPE
// applied; its keys and values are stored at their slots (write_kv), then every token attends
// (paged_attention). Returns [tokens, heads * head_dim] in qkv's dtype. One call where there
// were five from Python (split, views, store, attend, convert): at one decode token a layer's
// attention reads ~100 KB, and those calls cost ~11 µs a layer more than this one does.
at::Tensor attend(at::Tensor qkv, int64_t num_heads, int64_t num_kv_heads, at::Tensor k_cache,
                  at::Tensor v_cache, c10::optional<at::Tensor> k_scales,
                  c10::optional<at::Tensor> v_scales, at::Tensor slot_blocks,
                  at::Tensor slot_offsets, at::Tensor block_tables, at::Tensor token_seqs,
                  at::Tensor token_lens, double scale) {
  TORCH_CHECK(qkv.dim() == 2 && qkv.stride(1) == 1,
              "qkv must be [tokens, width] with contiguous rows");
  TORCH_CHECK(num_heads > 0 && num_kv_heads > 0 &&
                  qkv.size(1) % (num_heads + 2 * num_kv_heads) == 0,
              "qkv's width is not (heads + 2 kv_heads) * head_dim");
  const int64_t tokens = qkv.size(0), head_dim = qkv.size(1) / (num_heads + 2 * num_kv_heads);
  auto heads_of = [&](int64_t first, int64_t count) {
    return qkv.narrow(1, first * head_dim, count * head_dim).view({tokens, count, head_dim});
  };
  write_kv(heads_of(num_heads, num_kv_heads), heads_of(num_heads + num_kv_heads, num_kv_heads),
           k_cache, v_cache, k_scales, v_scales, slot_blocks, slot_offsets);
  return paged_attention(heads_of(0, num_heads), k_cache, v_cache, k_scales, v_scales,
                         block_tables, token_seqs, token_lens, scale, qkv.scalar_type())
      .view({tokens, num_heads * head_dim});
}
