// y = x W^T (+ bias) for the few rows of a decode step: x [M, K] (float32 or bfloat16),
// W [N, K] (float32 or bfloat16), accumulated in float32, y in the requested dtype.
//
// At a handful of rows a linear layer is a weight stream: every weight is read once and used M
// times. A tile of kTileN weight rows stays in cache while all M input rows pass over it, a few
// at a time, each (input row, weight row) pair with its own vector accumulator. Every output is
// reduced in the same order whatever M is, so a row's result does not depend on its batch.
// bfloat16 weights halve the bytes streamed and widen exactly to float32 (a 16-bit shift), so
// the arithmetic is float32 throughout; only y is rounded to bfloat16 when asked, to nearest
// even as PyTorch does.
//
// Where the CPU has AVX-512 BF16, a bfloat16 x meets a bfloat16 weight in its dot-product
// instruction instead (vdpbf16ps: 32 products per instruction, summed in float32): the
// products are exact, only the float32 sums round differently. On an AMD EPYC with AVX-512 BF16
// and no AMX a draft-less token's projections went from 7.6 to 4.4 ms (35 -> 61 GB/s of the
// weight stream at one row), and the AVX2 tiles were compute-bound long before the memory was.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include "linear_output.h"
#include "widen.h"

#include <algorithm>
#include <cstdint>
#include <cstring>

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>
#define RAGSERVE_AVX2 1
#endif
#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#define RAGSERVE_BF16_DOT 1
#endif

namespace {

// Weight rows per task: 8 rows of K = 576..1536 are 9..48 KB, which stay in L1/L2 while every
// input row passes over them.
constexpr int64_t kTileN = 8;
// Input rows per pass over the weights: a block of rows (up to 32 x 1536 float32 = 192 KB)
// stays in L2 while the weights stream past it once. Longer inputs (prompt chunks in the
// batch-invariant mode) take one pass per block; each row's result is the same either way.
constexpr int64_t kRowBlock = 32;
// Weight bytes below which a call is not split across threads.
constexpr int64_t kMinThreadBytes = 1 << 16;

// y[m][n] for the kRowsM x kRowsN tile of x rows and weight rows at (x, w); x and w rows are
// k_size apart, y rows n_size apart. Sizes are compile-time so the accumulators stay in
// registers: a single input row gets eight weight rows (a pure weight stream), more rows share
// each widened weight vector.
template <int kRowsM, int kRowsN, typename w_t, typename y_t>
static inline void tile(const float* x, const w_t* w, const float* bias, y_t* y, int64_t k_size,
                        int64_t n_size) {
  float dots[kRowsM][kRowsN] = {};
  int64_t k = 0;
#ifdef RAGSERVE_AVX2
  __m256 acc[kRowsM][kRowsN];
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n) acc[m][n] = _mm256_setzero_ps();
  for (; k + 8 <= k_size; k += 8) {
    __m256 wv[kRowsN];
    for (int n = 0; n < kRowsN; ++n) wv[n] = load8(w + n * k_size + k);
    for (int m = 0; m < kRowsM; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * k_size + k);
      for (int n = 0; n < kRowsN; ++n) acc[m][n] = _mm256_fmadd_ps(xv, wv[n], acc[m][n]);
    }
  }
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n) dots[m][n] = sum8(acc[m][n]);
#endif
  for (; k < k_size; ++k)
    for (int m = 0; m < kRowsM; ++m)
      for (int n = 0; n < kRowsN; ++n) dots[m][n] += x[m * k_size + k] * widen(w[n * k_size + k]);
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n)
      y[m * n_size + n] = y_t(dots[m][n] + (bias ? bias[n] : 0.0f));
}

// Weight rows [n0, n0 + kTileN) against every input row.
template <typename w_t, typename y_t>
static inline void weight_tile(const float* x, const w_t* w, const float* bias, y_t* y,
                               int64_t m_size, int64_t k_size, int64_t n_size) {
  int64_t m = 0;
  if (m_size == 1) {
    tile<1, 8>(x, w, bias, y, k_size, n_size);
    return;
  }
  // Six input rows share each pair of weight vectors: twelve accumulators, two weight vectors
  // and one input vector fill 15 of the 16 AVX2 registers (measured against four rows: 76 ->
  // 115 GFLOP/s at 8 float32 rows, 88 -> 108 at 512).
  for (; m + 6 <= m_size; m += 6)
    for (int64_t n = 0; n < kTileN; n += 2)
      tile<6, 2>(x + m * k_size, w + n * k_size, bias ? bias + n : nullptr, y + m * n_size + n,
                 k_size, n_size);
  for (; m + 4 <= m_size; m += 4)
    for (int64_t n = 0; n < kTileN; n += 2)
      tile<4, 2>(x + m * k_size, w + n * k_size, bias ? bias + n : nullptr, y + m * n_size + n,
                 k_size, n_size);
  for (; m + 2 <= m_size; m += 2)
    for (int64_t n = 0; n < kTileN; n += 4)
      tile<2, 4>(x + m * k_size, w + n * k_size, bias ? bias + n : nullptr, y + m * n_size + n,
                 k_size, n_size);
  for (; m < m_size; ++m)
    tile<1, 8>(x + m * k_size, w, bias, y + m * n_size, k_size, n_size);
}

// Asks for bytes at p to be brought into L2 without waiting for them.
static inline void prefetch(const void* p, int64_t bytes) {
#ifdef RAGSERVE_AVX2
  const char* c = static_cast<const char*>(p);
  for (int64_t i = 0; i < bytes; i += 64) _mm_prefetch(c + i, _MM_HINT_T1);
#endif
}

template <typename w_t, typename y_t>
static void linear_rows(const float* x, const w_t* w, const float* bias, y_t* y, int64_t m_size,
                        int64_t n_size, int64_t k_size) {
  const int64_t tiles = n_size / kTileN;
  const int64_t tile_bytes = kTileN * k_size * int64_t(sizeof(w_t));
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / tile_bytes);
  for (int64_t m0 = 0; m0 < m_size; m0 += kRowBlock) {
    const int64_t rows = std::min(kRowBlock, m_size - m0);
    const float* xs = x + m0 * k_size;
    y_t* ys = y + m0 * n_size;
    at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        // The next tile streams in while this one computes; without it, past one input row
        // each tile's first pass waited on memory and the later passes left the bus idle.
        if (t + 1 < end) prefetch(w + (t + 1) * kTileN * k_size, tile_bytes);
        weight_tile(xs, w + t * kTileN * k_size, bias ? bias + t * kTileN : nullptr,
                    ys + t * kTileN, rows, k_size, n_size);
      }
    });
    // Weight rows past the last whole tile, one at a time.
    for (int64_t n = tiles * kTileN; n < n_size; ++n)
      for (int64_t m = 0; m < rows; ++m)
        tile<1, 1>(xs + m * k_size, w + n * k_size, bias ? bias + n : nullptr,
                   ys + m * n_size + n, k_size, n_size);
  }
}

#ifdef RAGSERVE_BF16_DOT
// acc += the pairwise products of a and b's 32 bfloat16 lanes, summed in pairs (vdpbf16ps).
// Written out: GCC 12 did not give the intrinsic's result its accumulator's register, and
// copied or stored every accumulator around every instruction.
static inline __m512i dot_accumulate(__m512i acc, __m512i a, __m512i b) {
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// Columns [k0, k_end) of the kRowsM x kRowsN tile's dot products from bfloat16 rows (their
// bits as uint16_t), 32 products of each (x row, weight row) pair per instruction, added into
// sums: whole blocks of 32, or (kPartial) one block of fewer columns, read as zeros past them.
// GCC 12 kept the accumulators in memory as well as in registers, storing every one on every
// step (1.3-2x slower), unless they are a flat array of at most 8 vectors in a function of
// their own without a tail.
template <int kRowsM, int kRowsN, bool kPartial>
__attribute__((noinline)) static void dot_block(const uint16_t* x, const uint16_t* w,
                                                __m512 (&sums)[kRowsM * kRowsN], int64_t k0,
                                                int64_t k_end, int64_t k_size) {
  static_assert(kRowsM * kRowsN <= 8, "more accumulators than GCC keeps in registers");
  // float32 lanes, held as integer vectors: with float ones GCC 12 stored them on every step.
  __m512i acc[kRowsM * kRowsN];
  for (int i = 0; i < kRowsM * kRowsN; ++i) acc[i] = _mm512_setzero_si512();
  const __mmask32 lanes = kPartial ? __mmask32((1ull << (k_end - k0)) - 1) : ~__mmask32(0);
  // At least one block (the caller's k0 < k_end): a loop that may run no times left GCC 12
  // storing the accumulators on every step for the path that skips it.
  int64_t k = k0;
  do {
    __m512i wv[kRowsN];
    for (int n = 0; n < kRowsN; ++n) wv[n] = _mm512_maskz_loadu_epi16(lanes, w + n * k_size + k);
    for (int m = 0; m < kRowsM; ++m) {
      const __m512i xv = _mm512_maskz_loadu_epi16(lanes, x + m * k_size + k);
      for (int n = 0; n < kRowsN; ++n)
        acc[m * kRowsN + n] = dot_accumulate(acc[m * kRowsN + n], xv, wv[n]);
    }
    k += 32;
  } while (k < k_end);
  for (int i = 0; i < kRowsM * kRowsN; ++i)
    sums[i] = _mm512_add_ps(sums[i], _mm512_castsi512_ps(acc[i]));
}

// The kRowsM x kRowsN tile of y at (x, w): each pair's float32 vector of dot products summed
// across its lanes at the end. Every pair takes the same steps at every tile shape, so a row's
// result does not depend on its batch.
template <int kRowsM, int kRowsN, typename y_t>
static inline void dot_tile(const uint16_t* x, const uint16_t* w, const float* bias, y_t* y,
                            int64_t k_size, int64_t n_size) {
  __m512 acc[kRowsM * kRowsN];
  for (int i = 0; i < kRowsM * kRowsN; ++i) acc[i] = _mm512_setzero_ps();
  const int64_t whole = k_size / 32 * 32;
  if (whole > 0) dot_block<kRowsM, kRowsN, false>(x, w, acc, 0, whole, k_size);
  if (k_size > whole) dot_block<kRowsM, kRowsN, true>(x, w, acc, whole, k_size, k_size);
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; n += 4) {
      // Four vectors' sums at once, or one's beside zeros in a one-column tile.
      const int i0 = m * kRowsN + n;
      const __m512 none = _mm512_setzero_ps();
      __m128 sums;
      if constexpr (kRowsN % 4 == 0)
        sums = sum4x16(acc[i0], acc[i0 + 1], acc[i0 + 2], acc[i0 + 3]);
      else
        sums = sum4x16(acc[i0], none, none, none);
      alignas(16) float dots[4];
      _mm_store_ps(dots, sums);
      for (int i = 0; i < std::min(4, kRowsN); ++i)
        y[m * n_size + n + i] = y_t(dots[i] + (bias ? bias[n + i] : 0.0f));
    }
}

// y = x W^T for bfloat16 x and W, tiles of kTileN weight rows split across threads.
template <typename y_t>
static void dot_rows(const uint16_t* x, const uint16_t* w, const float* bias, y_t* y,
                     int64_t m_size, int64_t n_size, int64_t k_size) {
  const int64_t tiles = n_size / kTileN;
  const int64_t tile_bytes = kTileN * k_size * int64_t(sizeof(uint16_t));
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / tile_bytes);
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint16_t* wt = w + t * kTileN * k_size;
      // The next tile into L1 while this one computes: one tile ahead measured best (4.4 ms
      // per token's projections, against 4.6 without and 4.7-5.0 two to four tiles ahead).
      if (t + 1 < end) {
        const char* next = reinterpret_cast<const char*>(wt + kTileN * k_size);
        for (int64_t i = 0; i < tile_bytes; i += 64) _mm_prefetch(next + i, _MM_HINT_T0);
      }
      const float* bt = bias ? bias + t * kTileN : nullptr;
      int64_t m = 0;
      // Two input rows share each four weight vectors.
      for (; m + 2 <= m_size; m += 2)
        for (int64_t n = 0; n < kTileN; n += 4)
          dot_tile<2, 4>(x + m * k_size, wt + n * k_size, bt ? bt + n : nullptr,
                         y + m * n_size + t * kTileN + n, k_size, n_size);
      for (; m < m_size; ++m)
        dot_tile<1, kTileN>(x + m * k_size, wt, bt, y + m * n_size + t * kTileN, k_size, n_size);
    }
  });
  for (int64_t n = tiles * kTileN; n < n_size; ++n)
    for (int64_t m = 0; m < m_size; ++m)
      dot_tile<1, 1>(x + m * k_size, w + n * k_size, bias ? bias + n : nullptr,
                     y + m * n_size + n, k_size, n_size);
}
#endif

}  // namespace

at::Tensor small_batch_linear(at::Tensor x, at::Tensor weight, c10::optional<at::Tensor> bias,
                              at::ScalarType out_dtype) {
  TORCH_CHECK(x.dim() == 2 && weight.dim() == 2, "x and weight must be matrices");
  TORCH_CHECK(x.size(1) == weight.size(1), "x and weight differ in K");
  TORCH_CHECK(weight.is_contiguous(), "weight must be contiguous");
  const int64_t m = x.size(0), n = weight.size(0), k = weight.size(1);
  auto out = linear_output(x, bias, m, n, out_dtype);
#ifdef RAGSERVE_BF16_DOT
  if (x.scalar_type() == at::kBFloat16 && weight.scalar_type() == at::kBFloat16) {
    auto xs = x.contiguous();
    const auto* x_bits = reinterpret_cast<const uint16_t*>(xs.data_ptr<at::BFloat16>());
    const auto* w_bits = reinterpret_cast<const uint16_t*>(weight.data_ptr<at::BFloat16>());
    with_output(out.y, [&](auto* y) { dot_rows(x_bits, w_bits, out.bias, y, m, n, k); });
    return out.y;
  }
#endif
  auto x32 = x.to(at::kFloat).contiguous();
  const float* xs = x32.data_ptr<float>();
  if (weight.scalar_type() == at::kBFloat16) {
    const auto* w = weight.data_ptr<at::BFloat16>();
    with_output(out.y, [&](auto* y) { linear_rows(xs, w, out.bias, y, m, n, k); });
  } else {
    TORCH_CHECK(weight.scalar_type() == at::kFloat, "weight must be float32 or bfloat16");
    const auto* w = weight.data_ptr<float>();
    with_output(out.y, [&](auto* y) { linear_rows(xs, w, out.bias, y, m, n, k); });
  }
  return out.y;
}
