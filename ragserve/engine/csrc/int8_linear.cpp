// y = (x Q^T) * scale (+ bias) for the few rows of a decode step, where Q [N, K] holds a weight
// in int8 and scale [N] its rows' float32 scales (weight ~= Q * scale[:, None]).
//
// A decode step streams every weight once, and at one row the bfloat16 stream is already at
// the memory's pace (linear.cpp); int8 halves the bytes. Each row of x is rounded to int16 (one
// scale per row, 2^-15 of its largest magnitude) and meets the weights in exact integer sums
// (vpdpwssd with VNNI), so past the weight's own rounding to int8 the error is x's rounding and
// float32's across blocks. As in linear.cpp, every output is reduced in the same order whatever
// M is.
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>

#include "widen.h"

#include <immintrin.h>  // SSE (x86-64's baseline) for the scaling on every path; AVX2, AVX-512

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#if defined(__AVX512F__) && defined(__AVX512BW__)
#define RAGSERVE_INT8_AVX512 1
#elif defined(__AVX2__) && defined(__FMA__)
#define RAGSERVE_INT8_AVX2 1
#endif

namespace {

// Weight rows per task (8 rows of K = 1536 int8 are 12 KB).
constexpr int64_t kTileN = 8;
// Weight bytes below which a call is not split across threads.
constexpr int64_t kMinThreadBytes = 1 << 15;

// Columns summed in int32 lanes before they are added into float32: a lane takes two products
// of at most 127 * 32767 per vector of columns, so over 4096 columns it holds at most 1.07e9
// (AVX-512, 16 lanes) or 2.13e9 (AVX2, 8 lanes), within int32's 2.147e9 whatever the values.
constexpr int64_t kBlockK = 4096;

#if defined(RAGSERVE_INT8_AVX512)
using IVec = __m512i;
using FVec = __m512;
constexpr int64_t kLanes = 32;  // int16 lanes of one vector
static inline __mmask32 lane_mask(int64_t n) { return __mmask32((1ull << n) - 1); }
static inline IVec load_x(const int16_t* p, int64_t n) {
  return _mm512_maskz_loadu_epi16(lane_mask(n), p);
}
static inline IVec load_q(const int8_t* p, int64_t n) {
  return _mm512_cvtepi8_epi16(_mm256_maskz_loadu_epi8(lane_mask(n), p));
}
static inline IVec izero() { return _mm512_setzero_si512(); }
static inline FVec fzero() { return _mm512_setzero_ps(); }
// acc += pairwise products of x and q, summed in pairs (vpdpwssd with AVX-512 VNNI).
static inline IVec madd(IVec acc, IVec x, IVec q) {
#ifdef __AVX512VNNI__
  // Written out: GCC 12 did not give the intrinsic's result its accumulator's register, and
  // copied every accumulator around every instruction.
  asm("vpdpwssd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(q));
  return acc;
#else
  return _mm512_add_epi32(acc, _mm512_madd_epi16(x, q));
#endif
}
static inline FVec widen_add(FVec f, IVec i) { return _mm512_add_ps(f, _mm512_cvtepi32_ps(i)); }
// The lane sums of v[0..3], or of v[0] alone in a one-column tile (widen.h).
template <int kRowsN>
static inline __m128 sum4(const FVec* v) {
  if constexpr (kRowsN % 4 == 0) return sum4x16(v[0], v[1], v[2], v[3]);
  return sum4x16(v[0], fzero(), fzero(), fzero());
}
#elif defined(RAGSERVE_INT8_AVX2)
using IVec = __m256i;
using FVec = __m256;
constexpr int64_t kLanes = 16;
static inline IVec load_x(const int16_t* p, int64_t n) {
  if (n == kLanes) return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  alignas(32) int16_t part[kLanes] = {};
  std::memcpy(part, p, n * sizeof(int16_t));
  return _mm256_load_si256(reinterpret_cast<const __m256i*>(part));
}
static inline IVec load_q(const int8_t* p, int64_t n) {
  alignas(16) int8_t part[kLanes] = {};
  if (n == kLanes)
    return _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  std::memcpy(part, p, n);
  return _mm256_cvtepi8_epi16(_mm_load_si128(reinterpret_cast<const __m128i*>(part)));
}
static inline IVec izero() { return _mm256_setzero_si256(); }
static inline FVec fzero() { return _mm256_setzero_ps(); }
static inline IVec madd(IVec acc, IVec x, IVec q) {
  return _mm256_add_epi32(acc, _mm256_madd_epi16(x, q));
}
static inline FVec widen_add(FVec f, IVec i) { return _mm256_add_ps(f, _mm256_cvtepi32_ps(i)); }
template <int kRowsN>
static inline __m128 sum4(const FVec* v) {
  if constexpr (kRowsN % 4 == 0) return _mm_setr_ps(sum8(v[0]), sum8(v[1]), sum8(v[2]), sum8(v[3]));
  return _mm_setr_ps(sum8(v[0]), 0.0f, 0.0f, 0.0f);
}
#endif

#if defined(RAGSERVE_INT8_AVX512) || defined(RAGSERVE_INT8_AVX2)
// Columns [k0, k_end) of the tile's dot products, summed exactly in int32 lanes, added into
// total as float32: whole vectors, or (kPartial) one vector of fewer lanes. GCC 12 kept the
// accumulators in memory as well as in registers, storing every one on every step (1.6x slower
// at 4-8 rows), unless they are a flat array of at most 8 vectors in a function of their own.
template <int kRowsM, int kRowsN, bool kPartial>
__attribute__((noinline)) static void block_dots(const int16_t* x, const int8_t* q,
                                                 FVec (&total)[kRowsM][kRowsN], int64_t k0,
                                                 int64_t k_end, int64_t k_size) {
  static_assert(kRowsM * kRowsN <= 8, "more accumulators than GCC keeps in registers");
  IVec acc[kRowsM * kRowsN];
  for (int i = 0; i < kRowsM * kRowsN; ++i) acc[i] = izero();
  const int64_t lanes = kPartial ? k_end - k0 : kLanes;
  // At least one vector (the caller's k0 < k_end): see dot_block in linear.cpp.
  int64_t k = k0;
  do {
    IVec wv[kRowsN];
    for (int n = 0; n < kRowsN; ++n) wv[n] = load_q(q + n * k_size + k, lanes);
    for (int m = 0; m < kRowsM; ++m) {
      const IVec xv = load_x(x + m * k_size + k, lanes);
      for (int n = 0; n < kRowsN; ++n) acc[m * kRowsN + n] = madd(acc[m * kRowsN + n], xv, wv[n]);
    }
    k += kLanes;
  } while (k < k_end);
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n) total[m][n] = widen_add(total[m][n], acc[m * kRowsN + n]);
}
#endif

// The kRowsM x kRowsN tile of integer dot products of x rows (int16) and weight rows (int8),
// each returned in float32 (exact integer sums per block, float32 across blocks).
template <int kRowsM, int kRowsN>
static inline void tile_dots(const int16_t* x, const int8_t* q, float (&dots)[kRowsM][kRowsN],
                             int64_t k_size) {
#if defined(RAGSERVE_INT8_AVX512) || defined(RAGSERVE_INT8_AVX2)
  FVec total[kRowsM][kRowsN];
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n) total[m][n] = fzero();
  for (int64_t k0 = 0; k0 < k_size; k0 += kBlockK) {
    const int64_t k_end = std::min(k_size, k0 + kBlockK);
    const int64_t whole = k0 + (k_end - k0) / kLanes * kLanes;
    if (whole > k0) block_dots<kRowsM, kRowsN, false>(x, q, total, k0, whole, k_size);
    if (k_end > whole) block_dots<kRowsM, kRowsN, true>(x, q, total, whole, k_end, k_size);
  }
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; n += 4) {
      alignas(16) float sums[4];
      _mm_store_ps(sums, sum4<kRowsN>(total[m] + n));
      for (int i = 0; i < std::min(4, kRowsN); ++i) dots[m][n + i] = sums[i];
    }
#else
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; ++n) {
      float total = 0.0f;
      for (int64_t k0 = 0; k0 < k_size; k0 += kBlockK) {
        int32_t acc = 0;
        for (int64_t k = k0; k < std::min(k_size, k0 + kBlockK); ++k)
          acc += int32_t(x[m * k_size + k]) * int32_t(q[n * k_size + k]);
        total += float(acc);
      }
      dots[m][n] = total;
    }
#endif
}

// Four outputs of a row from their integer dot products, in one compiled sequence: inlined
// into each tile shape, -ffast-math was free to reorder the products, and a row's last bit
// then depended on the tile its batch gave it.
__attribute__((noinline)) static __m128 scaled4(__m128 dots, float x_scale, __m128 scale,
                                                __m128 bias) {
  return _mm_add_ps(_mm_mul_ps(_mm_mul_ps(dots, _mm_set1_ps(x_scale)), scale), bias);
}

template <int kRowsM, int kRowsN, typename y_t>
static inline void tile(const int16_t* x, const float* x_scale, const int8_t* q,
                        const float* scale, const float* bias, y_t* y, int64_t k_size,
                        int64_t n_size) {
  constexpr int kWidth = std::min(4, kRowsN);
  alignas(16) float dots[kRowsM][kRowsN];
  tile_dots<kRowsM, kRowsN>(x, q, dots, k_size);
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < kRowsN; n += 4) {
      alignas(16) float part[3][4] = {};
      for (int i = 0; i < kWidth; ++i) {
        part[0][i] = dots[m][n + i];
        part[1][i] = scale[n + i];
        part[2][i] = bias ? bias[n + i] : 0.0f;
      }
      alignas(16) float out[4];
      _mm_store_ps(out, scaled4(_mm_load_ps(part[0]), x_scale[m], _mm_load_ps(part[1]),
                                _mm_load_ps(part[2])));
      for (int i = 0; i < kWidth; ++i) y[m * n_size + n + i] = y_t(out[i]);
    }
}

template <typename y_t>
static void int8_rows(const int16_t* x, const float* x_scale, const int8_t* q, const float* scale,
                      const float* bias, y_t* y, int64_t m_size, int64_t n_size, int64_t k_size) {
  const int64_t tiles = n_size / kTileN;
  const int64_t tile_bytes = kTileN * k_size;
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / tile_bytes);
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t n0 = t * kTileN;
      const int8_t* qt = q + n0 * k_size;
#if defined(RAGSERVE_INT8_AVX512) || defined(RAGSERVE_INT8_AVX2)
      if (t + 1 < end)
        for (int64_t i = 0; i < tile_bytes; i += 64)
          _mm_prefetch(reinterpret_cast<const char*>(qt + tile_bytes + i), _MM_HINT_T0);
#endif
      const float* bt = bias ? bias + n0 : nullptr;
      int64_t m = 0;
      for (; m + 2 <= m_size; m += 2)
        for (int64_t n = 0; n < kTileN; n += 4)
          tile<2, 4>(x + m * k_size, x_scale + m, qt + n * k_size, scale + n0 + n,
                     bt ? bt + n : nullptr, y + m * n_size + n0 + n, k_size, n_size);
      for (; m < m_size; ++m)
        tile<1, kTileN>(x + m * k_size, x_scale + m, qt, scale + n0, bt, y + m * n_size + n0,
                        k_size, n_size);
    }
  });
  for (int64_t n = tiles * kTileN; n < n_size; ++n)
    for (int64_t m = 0; m < m_size; ++m)
      tile<1, 1>(x + m * k_size, x_scale + m, q + n * k_size, scale + n,
                 bias ? bias + n : nullptr, y + m * n_size + n, k_size, n_size);
}

// Each row of x as int16 values and one scale (x ~= values * scale): 2^-15 of the row's largest
// magnitude, finer than bfloat16's 2^-8 relative step for all but its smallest elements.
static void quantize_rows(const float* x, int16_t* values, float* scales, int64_t m_size,
                          int64_t k_size) {
  for (int64_t m = 0; m < m_size; ++m) {
    const float* row = x + m * k_size;
    float largest = 0.0f;
    for (int64_t k = 0; k < k_size; ++k) largest = std::max(largest, std::fabs(row[k]));
    const float scale = largest > 0.0f ? largest / 32767.0f : 1.0f;
    const float inverse = 1.0f / scale;
    for (int64_t k = 0; k < k_size; ++k)
      values[m * k_size + k] = int16_t(std::nearbyint(row[k] * inverse));
    scales[m] = scale;
  }
}

}  // namespace

at::Tensor int8_linear(at::Tensor x, at::Tensor qweight, at::Tensor scale,
                       c10::optional<at::Tensor> bias, at::ScalarType out_dtype) {
  TORCH_CHECK(x.dim() == 2 && qweight.dim() == 2, "x and qweight must be matrices");
  TORCH_CHECK(qweight.scalar_type() == at::kChar && qweight.is_contiguous(),
              "qweight must be contiguous int8");
  TORCH_CHECK(x.size(1) == qweight.size(1), "x and qweight differ in K");
  const int64_t m = x.size(0), n = qweight.size(0), k = qweight.size(1);
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous() && scale.numel() == n,
              "scale must be N contiguous float32 values");
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16,
              "out_dtype must be float32 or bfloat16");
  auto x32 = x.to(at::kFloat).contiguous();
  at::Tensor bias32;
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == n, "bias must have N elements");
    bias32 = bias->to(at::kFloat).contiguous();
  }
  const float* bias_ptr = bias.has_value() ? bias32.data_ptr<float>() : nullptr;
  auto y = at::empty({m, n}, x.options().dtype(out_dtype));
  std::vector<int16_t> x16(m * k);
  std::vector<float> x_scale(m);
  quantize_rows(x32.data_ptr<float>(), x16.data(), x_scale.data(), m, k);
  const int8_t* q = qweight.data_ptr<int8_t>();
  if (out_dtype == at::kBFloat16)
    int8_rows(x16.data(), x_scale.data(), q, scale.data_ptr<float>(), bias_ptr,
              y.data_ptr<at::BFloat16>(), m, n, k);
  else
    int8_rows(x16.data(), x_scale.data(), q, scale.data_ptr<float>(), bias_ptr,
              y.data_ptr<float>(), m, n, k);
  return y;
}
