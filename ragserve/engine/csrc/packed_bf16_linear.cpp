// y = x W^T (+ bias) for the few rows of a decode step, where W [N, K] is a bfloat16 weight
// packed by packing.pack_rows: tiles of kTileRows rows, each tile kChunk columns of its first
// row, then of its second, ..., then the next kChunk columns. A tile is one sequential stream
// that the hardware prefetcher follows, where the plain layout's rows read side by side were
// several (linear.cpp streams eight rows that way).
//
// A bfloat16 x meets the weight in AVX-512 BF16 dot products (vdpbf16ps, 32 products per
// instruction summed in float32); a float32 x in float32 products of the exactly widened
// weight. Each (x row, weight row) pair has its own accumulator fed chunk by chunk in order and
// summed across its lanes in one fixed tree, so a row's result does not depend on its batch.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include "linear_output.h"
#include "widen.h"

#include <algorithm>
#include <cstdint>
#include <type_traits>

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>
#define RAGSERVE_PACKED_BF16 1
#endif

#ifdef RAGSERVE_PACKED_BF16
namespace {

constexpr int64_t kTileRows = 4;
constexpr int64_t kChunk = 32;
// Weight bytes below which a call is not split across threads.
constexpr int64_t kMinThreadBytes = 1 << 16;

static inline __m512i dot_accumulate(__m512i acc, __m512i a, __m512i b) {
  // Written out: GCC 12 did not give the intrinsic's result its accumulator's register.
  asm("vdpbf16ps %2, %1, %0" : "+v"(acc) : "v"(a), "v"(b));
  return acc;
}

// The dot products of kRowsM bfloat16 x rows (k_size apart) with the tile's four weight rows,
// lane i of sums[m] holding weight row i's. Eight accumulators at most: GCC 12 kept more of one
// array in memory as well as in registers (and four rows in two arrays of eight were no faster
// than two rows twice, at 4 to 16 rows).
template <int kRowsM>
__attribute__((noinline)) static void tile_dots(const uint16_t* x, const uint16_t* tile,
                                                int64_t chunks, int64_t k_size,
                                                __m128 (&sums)[kRowsM]) {
  static_assert(kRowsM * kTileRows <= 8, "more accumulators than GCC keeps in registers");
  __m512i acc[kRowsM * kTileRows];
  for (auto& a : acc) a = _mm512_setzero_si512();
  int64_t c = 0;
  do {
    __m512i w[kTileRows];
    for (int n = 0; n < kTileRows; ++n)
      w[n] = _mm512_loadu_si512(tile + (c * kTileRows + n) * kChunk);
    for (int m = 0; m < kRowsM; ++m) {
      const __m512i xv = _mm512_loadu_si512(x + m * k_size + c * kChunk);
      for (int n = 0; n < kTileRows; ++n)
        acc[m * kTileRows + n] = dot_accumulate(acc[m * kTileRows + n], xv, w[n]);
    }
  } while (++c < chunks);
  for (int m = 0; m < kRowsM; ++m) {
    const __m512i* a = acc + m * kTileRows;
    sums[m] = sum4x16(_mm512_castsi512_ps(a[0]), _mm512_castsi512_ps(a[1]),
                      _mm512_castsi512_ps(a[2]), _mm512_castsi512_ps(a[3]));
  }
}

// The same for one float32 x row: sixteen products of each pair per step, in float32.
__attribute__((noinline)) static void tile_dots_wide(const float* x, const uint16_t* tile,
                                                     int64_t chunks, __m128& sums) {
  __m512 acc[kTileRows];
  for (auto& a : acc) a = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c)
    for (int64_t half = 0; half < kChunk; half += 16) {
      const __m512 xv = _mm512_loadu_ps(x + c * kChunk + half);
      for (int n = 0; n < kTileRows; ++n) {
        const auto* w = reinterpret_cast<const c10::BFloat16*>(tile + (c * kTileRows + n) * kChunk);
        acc[n] = _mm512_fmadd_ps(xv, load16(w + half), acc[n]);
      }
    }
  sums = sum4x16(acc[0], acc[1], acc[2], acc[3]);
}

template <typename y_t>
static inline void store4(__m128 sums, const float* bias, y_t* y) {
  if (bias) sums = _mm_add_ps(sums, _mm_loadu_ps(bias));
  alignas(16) float out[4];
  _mm_store_ps(out, sums);
  for (int n = 0; n < kTileRows; ++n) y[n] = y_t(out[n]);
}

template <typename x_t, typename y_t>
static void packed_rows(const x_t* x, const uint16_t* w, const float* bias, y_t* y,
                        int64_t m_size, int64_t n_size, int64_t k_size) {
  const int64_t tiles = n_size / kTileRows;
  const int64_t chunks = k_size / kChunk;
  const int64_t tile_size = kTileRows * k_size;
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / (tile_size * 2));
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const uint16_t* tile = w + t * tile_size;
      const float* b = bias ? bias + t * kTileRows : nullptr;
      y_t* yt = y + t * kTileRows;
      if constexpr (std::is_same_v<x_t, float>) {
        for (int64_t m = 0; m < m_size; ++m) {
          __m128 sums;
          tile_dots_wide(x + m * k_size, tile, chunks, sums);
          store4(sums, b, yt + m * n_size);
        }
      } else {
        int64_t m = 0;
        for (; m + 2 <= m_size; m += 2) {
          __m128 sums[2];
          tile_dots<2>(x + m * k_size, tile, chunks, k_size, sums);
          store4(sums[0], b, yt + m * n_size);
          store4(sums[1], b, yt + (m + 1) * n_size);
        }
        if (m < m_size) {
          __m128 sums[1];
          tile_dots<1>(x + m * k_size, tile, chunks, k_size, sums);
          store4(sums[0], b, yt + m * n_size);
        }
      }
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
                  packed.dim() == 4 && packed.size(2) == kTileRows && packed.size(3) == kChunk,
              "packed must be a contiguous bfloat16 [tiles, chunks, 4, 32] (packing.pack_rows)");
  const int64_t m = x.size(0), n = packed.size(0) * kTileRows, k = packed.size(1) * kChunk;
  TORCH_CHECK(x.size(1) == k, "x and packed differ in K");
  auto out = linear_output(x, bias, m, n, out_dtype);
  const auto* w = reinterpret_cast<const uint16_t*>(packed.data_ptr<at::BFloat16>());
  if (x.scalar_type() == at::kBFloat16) {
    auto xs = x.contiguous();
    const auto* x_bits = reinterpret_cast<const uint16_t*>(xs.data_ptr<at::BFloat16>());
    with_output(out.y, [&](auto* y) { packed_rows(x_bits, w, out.bias, y, m, n, k); });
  } else {
    auto x32 = x.to(at::kFloat).contiguous();
    const float* xs = x32.data_ptr<float>();
    with_output(out.y, [&](auto* y) { packed_rows(xs, w, out.bias, y, m, n, k); });
  }
  return out.y;
#else
  TORCH_CHECK(false, "packed bfloat16 weights need AVX-512 BF16 (packing.pack_rows packs none "
                     "without it)");
#endif
}
