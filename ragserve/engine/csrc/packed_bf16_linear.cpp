// y = x W^T (+ bias) for a bfloat16 weight W [N, K] packed by packing.pack_pairs: [N / 16, K / 2,
// 16, 2], so that one 64-byte vector holds one pair of input columns for sixteen outputs, and a
// block of sixteen outputs is one sequential stream through K.
//
// A bfloat16 x meets the weight in AVX-512 BF16 dot products (vdpbf16ps: per lane, a float32
// accumulator plus the two products of a pair). A tile of up to kTileRows rows of x and
// kTileBlocks blocks of outputs keeps its kTileRows x kTileBlocks accumulators in registers:
// per pair of columns it loads the tile's weight vectors once and broadcasts one pair of each
// row of x, so the weights are read once per tile of rows, from memory at one row (where the
// layout streams like a matrix-vector product) and from cache at many (where the dot products
// bound it). A float32 x meets the weight's exactly widened values in float32 multiply-adds.
//
// Every output is one chain over the pairs of K in order, in its own lane, whatever tile or
// batch holds its row: a row's result does not depend on the rows computed with it.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include "linear_output.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define RAGSERVE_PACKED_BF16 1
#endif

#ifdef RAGSERVE_PACKED_BF16
namespace {

// Outputs per block, and a tile: kTileRows x kTileBlocks accumulators, 24 of the 32 registers.
constexpr int64_t kBlock = 16;
constexpr int kTileRows = 8;
constexpr int kTileBlocks = 3;
// Rows of a float32 x per tile: each pair needs two widened weight vectors per block.
constexpr int kWideTileRows = 4;
// Weight bytes below which a call is not split across threads.
constexpr int64_t kMinThreadBytes = 1 << 16;
// How far ahead of its reads each block's stream is prefetched (0: not at all), where the build
// asks for it (kernels.compiler_flags). On an Intel Xeon with AMX a one-row pass over SmolLM2's
// projections took 19.1 ms without, 16.9 with 1 KiB (three streams: 3 KiB ahead in all) and
// 16.5-19.1 with 2 KiB.
#if defined(RAGSERVE_SOFTWARE_PREFETCH)
constexpr int64_t kPrefetchAhead = 1024;
#else
constexpr int64_t kPrefetchAhead = 0;
#endif

static inline __m512 dot_accumulate(__m512 acc, __m512i a, __m512i b) {
  // Written out: GCC 12 did not give the intrinsic's result its accumulator's register.
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

template <typename y_t>
static inline void store_block(__m512 acc, const float* bias, y_t* y) {
  if (bias) acc = _mm512_add_ps(acc, _mm512_loadu_ps(bias));
  if constexpr (std::is_same_v<y_t, float>) {
    _mm512_storeu_ps(y, acc);
  } else {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(y), (__m256i)_mm512_cvtneps_pbh(acc));
  }
}

// Rows [0, kRows) of x (bfloat16 pairs as 32-bit words, `pairs` per row) against blocks
// [0, kBlocks) of w (`pairs` vectors each), into y (row stride n).
template <int kRows, int kBlocks, typename y_t>
static inline void tile(const uint32_t* x, const uint32_t* w, int64_t pairs, const float* bias,
                        y_t* y, int64_t n) {
  const uint32_t* block[kBlocks];
  __m512 acc[kRows][kBlocks];
#pragma GCC unroll 16
  for (int b = 0; b < kBlocks; ++b) block[b] = w + b * pairs * kBlock;
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512i weights[kBlocks];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) weights[b] = _mm512_loadu_si512(block[b] + p * kBlock);
    if constexpr (kPrefetchAhead > 0)
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b)
        _mm_prefetch(reinterpret_cast<const char*>(block[b] + p * kBlock) + kPrefetchAhead,
                     _MM_HINT_T0);
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512i pair = _mm512_set1_epi32(int(x[r * pairs + p]));
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b) acc[r][b] = dot_accumulate(acc[r][b], pair, weights[b]);
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b)
      store_block(acc[r][b], bias ? bias + b * kBlock : nullptr, y + r * n + b * kBlock);
}

// The same for float32 rows of x (2 pairs floats per row): each pair's low and high halves
// widened to float32, the even column's product added before the odd one's.
template <int kRows, int kBlocks, typename y_t>
static inline void wide_tile(const float* x, const uint32_t* w, int64_t pairs, const float* bias,
                             y_t* y, int64_t n) {
  const __m512i high_half = _mm512_set1_epi32(int(0xFFFF0000u));
  __m512 acc[kRows][kBlocks];
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) acc[r][b] = _mm512_setzero_ps();
  for (int64_t p = 0; p < pairs; ++p) {
    __m512 even[kBlocks], odd[kBlocks];
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b) {
      const __m512i both = _mm512_loadu_si512(w + (b * pairs + p) * kBlock);
      even[b] = _mm512_castsi512_ps(_mm512_slli_epi32(both, 16));
      odd[b] = _mm512_castsi512_ps(_mm512_and_si512(both, high_half));
    }
#pragma GCC unroll 16
    for (int r = 0; r < kRows; ++r) {
      const __m512 first = _mm512_set1_ps(x[r * 2 * pairs + 2 * p]);
      const __m512 second = _mm512_set1_ps(x[r * 2 * pairs + 2 * p + 1]);
#pragma GCC unroll 16
      for (int b = 0; b < kBlocks; ++b) {
        acc[r][b] = _mm512_fmadd_ps(first, even[b], acc[r][b]);
        acc[r][b] = _mm512_fmadd_ps(second, odd[b], acc[r][b]);
      }
    }
  }
#pragma GCC unroll 16
  for (int r = 0; r < kRows; ++r)
#pragma GCC unroll 16
    for (int b = 0; b < kBlocks; ++b)
      store_block(acc[r][b], bias ? bias + b * kBlock : nullptr, y + r * n + b * kBlock);
}

// Every row of x against kBlocks blocks: whole tiles of kMaxRows rows, then one tile of the rest.
template <int kMaxRows, int kBlocks, typename x_t, typename y_t>
static inline void block_rows(const x_t* x, const uint32_t* w, int64_t pairs, const float* bias,
                              y_t* y, int64_t m_size, int64_t n) {
  // Elements of x per row: pairs of bfloat16 in one 32-bit word each, or 2 pairs floats.
  const int64_t x_row = std::is_same_v<x_t, float> ? 2 * pairs : pairs;
  auto run = [&](auto rows, int64_t m) {
    constexpr int kRows = decltype(rows)::value;
    if constexpr (std::is_same_v<x_t, float>)
      wide_tile<kRows, kBlocks>(x + m * x_row, w, pairs, bias, y + m * n, n);
    else
      tile<kRows, kBlocks>(x + m * x_row, w, pairs, bias, y + m * n, n);
  };
  int64_t m = 0;
  for (; m + kMaxRows <= m_size; m += kMaxRows) run(std::integral_constant<int, kMaxRows>(), m);
  [&]<int... kRest>(std::integer_sequence<int, kRest...>) {
    ((m_size - m == kRest + 1 ? run(std::integral_constant<int, kRest + 1>(), m) : void()), ...);
  }(std::make_integer_sequence<int, kMaxRows - 1>());
}

template <int kMaxRows, typename x_t, typename y_t>
static void packed_rows(const x_t* x, const uint32_t* w, const float* bias, y_t* y,
                        int64_t m_size, int64_t n_size, int64_t pairs) {
  const int64_t blocks = n_size / kBlock;
  const int64_t groups = (blocks + kTileBlocks - 1) / kTileBlocks;
  const int64_t group_bytes = kTileBlocks * kBlock * pairs * 4;
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / group_bytes);
  at::parallel_for(0, groups, grain, [&](int64_t begin, int64_t end) {
    for (int64_t g = begin; g < end; ++g) {
      const int64_t first = g * kTileBlocks;
      const uint32_t* wg = w + first * pairs * kBlock;
      const float* bg = bias ? bias + first * kBlock : nullptr;
      y_t* yg = y + first * kBlock;
      const int64_t count = std::min<int64_t>(kTileBlocks, blocks - first);
      if (count == kTileBlocks)
        block_rows<kMaxRows, kTileBlocks>(x, wg, pairs, bg, yg, m_size, n_size);
      for (int64_t b = 0; count < kTileBlocks && b < count; ++b)
        block_rows<kMaxRows, 1>(x, wg + b * pairs * kBlock, pairs,
                                bg ? bg + b * kBlock : nullptr, yg + b * kBlock, m_size, n_size);
    }
  });
}

}  // namespace
#endif

at::Tensor packed_bf16_linear(at::Tensor x, at::Tensor packed, c10::optional<at::Tensor> bias,
                              at::ScalarType out_dtype) {
#ifdef RAGSERVE_PACKED_BF16
  TORCH_CHECK(x.dim() == 2, "x must be a matrix");
  TORCH_CHECK(packed.scalar_type() == at::kBFloat16 && packed.is_contiguous() &&
                  packed.dim() == 4 && packed.size(2) == kBlock && packed.size(3) == 2,
              "packed must be a contiguous bfloat16 [N / 16, K / 2, 16, 2] (packing.pack_pairs)");
  const int64_t m = x.size(0), n = packed.size(0) * kBlock, pairs = packed.size(1);
  TORCH_CHECK(x.size(1) == 2 * pairs, "x and packed differ in K");
  auto out = linear_output(x, bias, m, n, out_dtype);
  const auto* w = reinterpret_cast<const uint32_t*>(packed.data_ptr<at::BFloat16>());
  if (x.scalar_type() == at::kBFloat16) {
    auto xs = x.contiguous();
    const auto* x_pairs = reinterpret_cast<const uint32_t*>(xs.data_ptr<at::BFloat16>());
    with_output(out.y, [&](auto* y) {
      packed_rows<kTileRows>(x_pairs, w, out.bias, y, m, n, pairs);
    });
  } else {
    auto x32 = x.to(at::kFloat).contiguous();
    const float* xs = x32.data_ptr<float>();
    with_output(out.y, [&](auto* y) {
      packed_rows<kWideTileRows>(xs, w, out.bias, y, m, n, pairs);
    });
  }
  return out.y;
#else
  TORCH_CHECK(false, "packed bfloat16 weights need AVX-512 BF16 (packing.pack_pairs packs none "
                     "without it)");
#endif
}
