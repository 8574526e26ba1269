// y = (x Q^T) * scale (+ bias) for the few rows of a decode step, where Q [N, K] holds a weight
// in int8 and scale [N] its rows' float32 scales (weight ~= Q * scale[:, None]).
//
// A decode step streams every weight once, and int8 halves bfloat16's bytes. Q comes packed
// (packing.pack_int8): tiles of kTileRows weight rows, each tile kChunk columns of its first
// row, then of its second, ..., then the next kChunk columns, zero-padded to whole tiles and
// chunks. A tile is then one sequential stream that the hardware prefetcher follows, where rows
// read side by side from the plain layout were several. Over every projection of SmolLM2 on an
// AMD EPYC with AVX-512 VNNI (2 threads) one row took 6.1 ms on the plain layout and 5.0 packed
// (the machine reads the 134 MB at 27-35 GB/s), two rows 8.1 and 4.9, eight rows 27 and 10;
// the AVX2 build, 5.8-8.7 and 5.4 at one row.
//
// Each row of x is rounded to int16 (one scale per row, 2^-15 of its largest magnitude) and
// meets the weights in exact integer sums, so past the weight's own rounding to int8 the error
// is x's rounding and the final float32 scaling. With AVX-512 VNNI an int16 x is split into
// bytes, x = 256 * high + low, and each byte meets the int8 weights in vpdpbusd (64 products per
// instruction, no widening of the weights); its first operand is unsigned, so the high byte is
// offset by 128 and the weight row's sum (row_sums) takes the offset back out. Elsewhere the
// weights widen to int16 (vpmaddwd with AVX2). Every output is the same integer whatever M is.
#include <ATen/core/Tensor.h>
#include <ATen/Parallel.h>

#include "linear_output.h"

#include <immintrin.h>  // SSE (x86-64's baseline) for the scaling on every path; AVX2, AVX-512

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#if defined(__AVX512VNNI__) && defined(__AVX512BW__) && defined(__AVX512DQ__) && \
    defined(__AVX512VL__)
#define RAGSERVE_INT8_VNNI 1
#elif defined(__AVX2__)
#define RAGSERVE_INT8_AVX2 1
#endif

namespace {

// Weight rows per tile, and columns of a row per chunk (one AVX-512 vector of int8).
constexpr int64_t kTileRows = 4;
constexpr int64_t kChunk = 64;
// Weight bytes below which a call is not split across threads.
constexpr int64_t kMinThreadBytes = 1 << 15;
// How far ahead of its reads a tile prefetches its stream (0: not at all), where the build asks
// for it (kernels.compiler_flags). On an Intel Xeon with AMX, whose hardware prefetcher kept one
// core's stream at 5-6 GB/s where summing a tensor reads 8, a pass over SmolLM2's projections
// took 13.7 ms at one row without, 12.1 with 1 KiB, 11.3 with 2 KiB and 11.6 with 4 KiB; at
// eight rows 20.0 and 16.3 with 2 KiB.
#if defined(RAGSERVE_SOFTWARE_PREFETCH)
constexpr int64_t kPrefetchAhead = 2048;
#else
constexpr int64_t kPrefetchAhead = 0;
#endif

#if defined(RAGSERVE_INT8_VNNI)
// Columns summed in int32 before int64: a vpdpbusd lane adds four products of at most 255 * 128
// per chunk, so the sixteen lanes of a block of 32768 columns hold at most 1.07e9 together.
constexpr int64_t kBlockK = 32768;

static inline __m512i dot_bytes(__m512i acc, __m512i x, __m512i q) {
  // Written out: GCC 12 did not give the intrinsic's result its accumulator's register, and
  // copied every accumulator around every instruction.
  asm("vpdpbusd %2, %1, %0" : "+v"(acc) : "v"(x), "v"(q));
  return acc;
}

// The lane sums of four vectors, lane i of the result holding v_i's.
static inline __m128i sum4(const __m512i* v) {
  auto halves = [](__m512i w) {
    return _mm256_add_epi32(_mm512_castsi512_si256(w), _mm512_extracti64x4_epi64(w, 1));
  };
  const __m256i pairs01 = _mm256_hadd_epi32(halves(v[0]), halves(v[1]));
  const __m256i pairs23 = _mm256_hadd_epi32(halves(v[2]), halves(v[3]));
  const __m256i quads = _mm256_hadd_epi32(pairs01, pairs23);
  return _mm_add_epi32(_mm256_castsi256_si128(quads), _mm256_extracti128_si256(quads, 1));
}

// Adds to products (four int64 lanes per x row, one per weight row) the integer sums of kRowsM x
// rows (low and offset high bytes, rows k_size apart) with the tile's four weight rows over
// chunks [c0, c_end). On an AMD EPYC (family 25) the hardware prefetcher follows a tile's one
// stream, and prefetching the next tile (all at once, a chunk at a time, or two tiles ahead)
// made a one-row pass over SmolLM2's projections 5-15% slower and an eight-row one 15-30%, so
// only where kPrefetchAhead asks does a chunk prefetch the lines kPrefetchAhead bytes on, which
// run on into the next tiles (prefetches never fault, past the weight's end neither).
// GCC 12 kept more than eight accumulators of one array in memory as well as in registers; two
// arrays of at most eight, in a function of their own, stay in registers.
template <int kRowsM>
__attribute__((noinline)) static void tile_sums(const uint8_t* x_low, const uint8_t* x_high,
                                                const int8_t* tile, int64_t c0, int64_t c_end,
                                                int64_t k_size, __m256i (&products)[kRowsM]) {
  __m512i low[kRowsM * kTileRows], high[kRowsM * kTileRows];
  for (int i = 0; i < kRowsM * kTileRows; ++i) low[i] = _mm512_setzero_si512();
  for (int i = 0; i < kRowsM * kTileRows; ++i) high[i] = _mm512_setzero_si512();
  int64_t c = c0;
  do {
    const int8_t* chunk = tile + c * kTileRows * kChunk;
    if constexpr (kPrefetchAhead > 0)
      for (int n = 0; n < kTileRows; ++n)
        _mm_prefetch(reinterpret_cast<const char*>(chunk + kPrefetchAhead + n * kChunk),
                     _MM_HINT_T0);
    __m512i q[kTileRows];
    for (int n = 0; n < kTileRows; ++n) q[n] = _mm512_loadu_si512(chunk + n * kChunk);
    for (int m = 0; m < kRowsM; ++m) {
      const __m512i lo = _mm512_loadu_si512(x_low + m * k_size + c * kChunk);
      const __m512i hi = _mm512_loadu_si512(x_high + m * k_size + c * kChunk);
      for (int n = 0; n < kTileRows; ++n) {
        low[m * kTileRows + n] = dot_bytes(low[m * kTileRows + n], lo, q[n]);
        high[m * kTileRows + n] = dot_bytes(high[m * kTileRows + n], hi, q[n]);
      }
    }
  } while (++c < c_end);
  for (int m = 0; m < kRowsM; ++m) {
    const __m256i lo = _mm256_cvtepi32_epi64(sum4(low + m * kTileRows));
    const __m256i hi = _mm256_cvtepi32_epi64(sum4(high + m * kTileRows));
    products[m] = _mm256_add_epi64(products[m], _mm256_add_epi64(lo, _mm256_slli_epi64(hi, 8)));
  }
}
#else
// Columns summed in int32 before int64: an AVX2 lane adds two products of at most 32767 * 128
// per 16 columns, so over 4096 columns it holds at most 2.1474e9, within int32's 2.1475e9.
constexpr int64_t kBlockK = 4096;

// Adds to sums the integer sums of kRowsM int16 x rows with the tile's four weight rows over
// chunks [c0, c_end).
template <int kRowsM>
static void tile_sums(const int16_t* x, const int8_t* tile, int64_t c0, int64_t c_end,
                      int64_t k_size, int64_t (&sums)[kRowsM][4]) {
#if defined(RAGSERVE_INT8_AVX2)
  __m256i acc[kRowsM * 4];
  for (int i = 0; i < kRowsM * 4; ++i) acc[i] = _mm256_setzero_si256();
  for (int64_t c = c0; c < c_end; ++c)
    for (int64_t part = 0; part < kChunk; part += 16) {
      __m256i q[4];
      for (int n = 0; n < 4; ++n)
        q[n] = _mm256_cvtepi8_epi16(_mm_loadu_si128(
            reinterpret_cast<const __m128i*>(tile + (c * kTileRows + n) * kChunk + part)));
      for (int m = 0; m < kRowsM; ++m) {
        const __m256i xv = _mm256_loadu_si256(
            reinterpret_cast<const __m256i*>(x + m * k_size + c * kChunk + part));
        for (int n = 0; n < 4; ++n)
          acc[m * 4 + n] = _mm256_add_epi32(acc[m * 4 + n], _mm256_madd_epi16(xv, q[n]));
      }
    }
  for (int i = 0; i < kRowsM * 4; ++i) {
    alignas(32) int32_t lanes[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(lanes), acc[i]);
    for (int32_t lane : lanes) sums[i / 4][i % 4] += lane;
  }
#else
  for (int m = 0; m < kRowsM; ++m)
    for (int n = 0; n < 4; ++n)
      for (int64_t c = c0; c < c_end; ++c) {
        const int8_t* q = tile + (c * kTileRows + n) * kChunk;
        const int16_t* xs = x + m * k_size + c * kChunk;
        int32_t acc = 0;
        for (int64_t j = 0; j < kChunk; ++j) acc += int32_t(xs[j]) * int32_t(q[j]);
        sums[m][n] += acc;
      }
#endif
}
#endif

// x's rows as the kernel reads them, padded with zeros to whole chunks (k_size columns).
struct Rows {
  int64_t k_size;
  std::vector<float> scales;
#if defined(RAGSERVE_INT8_VNNI)
  std::vector<uint8_t> low, high;  // x = 256 * (high - 128) + low
#else
  std::vector<int16_t> values;
#endif
};

// Each row of x as int16 values and one scale (x ~= values * scale): 2^-15 of the row's largest
// magnitude, finer than bfloat16's 2^-8 relative step for all but its smallest elements.
static Rows quantize_rows(const float* x, int64_t m_size, int64_t k_size, int64_t k_padded) {
  Rows rows{k_padded, std::vector<float>(m_size)};
#if defined(RAGSERVE_INT8_VNNI)
  rows.low.assign(m_size * k_padded, 0);
  rows.high.assign(m_size * k_padded, 128);
#else
  rows.values.assign(m_size * k_padded, 0);
#endif
  for (int64_t m = 0; m < m_size; ++m) {
    const float* row = x + m * k_size;
    float largest = 0.0f;
    for (int64_t k = 0; k < k_size; ++k) largest = std::max(largest, std::fabs(row[k]));
    const float scale = largest > 0.0f ? largest / 32767.0f : 1.0f;
    const float inverse = 1.0f / scale;
    for (int64_t k = 0; k < k_size; ++k) {
      const auto value = int16_t(std::nearbyint(row[k] * inverse));
#if defined(RAGSERVE_INT8_VNNI)
      rows.low[m * k_padded + k] = uint8_t(value & 0xff);
      rows.high[m * k_padded + k] = uint8_t((value >> 8) + 128);
#else
      rows.values[m * k_padded + k] = value;
#endif
    }
    rows.scales[m] = scale;
  }
  return rows;
}

// The float32 values of the exact integer products of kRowsM rows from row m with the tile's
// four weight rows (each rounded once, so the same whatever the tile shape).
#if defined(RAGSERVE_INT8_VNNI)
template <int kRowsM>
static inline void tile_dots(const Rows& x, int64_t m, const int8_t* tile,
                             const int32_t* row_sums, __m128 (&dots)[kRowsM]) {
  const int64_t chunks = x.k_size / kChunk;
  const int64_t block_chunks = kBlockK / kChunk;
  __m256i products[kRowsM];
  for (auto& p : products) p = _mm256_setzero_si256();
  for (int64_t c0 = 0; c0 < chunks; c0 += block_chunks)
    tile_sums<kRowsM>(x.low.data() + m * x.k_size, x.high.data() + m * x.k_size, tile, c0,
                      std::min(chunks, c0 + block_chunks), x.k_size, products);
  // The high bytes were offset by 128, so their sums hold 128 * 256 times each row's sum more.
  const __m256i offset = _mm256_slli_epi64(
      _mm256_cvtepi32_epi64(_mm_loadu_si128(reinterpret_cast<const __m128i*>(row_sums))), 15);
  for (int i = 0; i < kRowsM; ++i)
    dots[i] = _mm256_cvtepi64_ps(_mm256_sub_epi64(products[i], offset));
}
#else
template <int kRowsM>
static inline void tile_dots(const Rows& x, int64_t m, const int8_t* tile,
                             const int32_t* row_sums, __m128 (&dots)[kRowsM]) {
  (void)row_sums;
  const int64_t chunks = x.k_size / kChunk;
  const int64_t block_chunks = kBlockK / kChunk;
  int64_t products[kRowsM][4] = {};
  for (int64_t c0 = 0; c0 < chunks; c0 += block_chunks)
    tile_sums<kRowsM>(x.values.data() + m * x.k_size, tile, c0,
                      std::min(chunks, c0 + block_chunks), x.k_size, products);
  for (int i = 0; i < kRowsM; ++i)
    dots[i] = _mm_setr_ps(float(products[i][0]), float(products[i][1]), float(products[i][2]),
                          float(products[i][3]));
}
#endif

// Four outputs of a row from their integer products, in one compiled sequence: inlined into
// each tile shape, -ffast-math was free to reorder the products, and a row's last bit then
// depended on the tile its batch gave it.
__attribute__((noinline)) static __m128 scaled4(__m128 dots, float x_scale, __m128 scale,
                                                __m128 bias) {
  return _mm_add_ps(_mm_mul_ps(_mm_mul_ps(dots, _mm_set1_ps(x_scale)), scale), bias);
}

// Four consecutive values from p, of which the first `width` exist (zeros for the others).
static inline __m128 load4(const float* p, int64_t width) {
  if (width == 4) return _mm_loadu_ps(p);
  alignas(16) float part[4] = {};
  for (int64_t i = 0; i < width; ++i) part[i] = p[i];
  return _mm_load_ps(part);
}

template <int kRowsM, typename y_t>
static inline void tile_outputs(const Rows& x, int64_t m, const int8_t* tile, int64_t n0,
                                const int32_t* row_sums, const float* scale, const float* bias,
                                y_t* y, int64_t n_size) {
  __m128 dots[kRowsM];
  tile_dots<kRowsM>(x, m, tile, row_sums + n0, dots);
  const int64_t width = std::min(kTileRows, n_size - n0);
  const __m128 scales = load4(scale + n0, width);
  const __m128 biases = bias ? load4(bias + n0, width) : _mm_setzero_ps();
  for (int i = 0; i < kRowsM; ++i) {
    alignas(16) float out[4];
    _mm_store_ps(out, scaled4(dots[i], x.scales[m + i], scales, biases));
    for (int n = 0; n < width; ++n) y[(m + i) * n_size + n0 + n] = y_t(out[n]);
  }
}

template <typename y_t>
static void int8_rows(const Rows& x, const int8_t* packed, const int32_t* row_sums,
                      const float* scale, const float* bias, y_t* y, int64_t m_size,
                      int64_t n_size) {
  const int64_t tiles = (n_size + kTileRows - 1) / kTileRows;
  const int64_t tile_bytes = kTileRows * x.k_size;
  const int64_t grain = std::max<int64_t>(1, kMinThreadBytes / tile_bytes);
  at::parallel_for(0, tiles, grain, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int8_t* tile = packed + t * tile_bytes;
      int64_t m = 0;
      for (; m + 2 <= m_size; m += 2)
        tile_outputs<2>(x, m, tile, t * kTileRows, row_sums, scale, bias, y, n_size);
      if (m < m_size) tile_outputs<1>(x, m, tile, t * kTileRows, row_sums, scale, bias, y, n_size);
    }
  });
}

}  // namespace

at::Tensor int8_linear(at::Tensor x, at::Tensor packed, at::Tensor row_sums, at::Tensor scale,
                       c10::optional<at::Tensor> bias, at::ScalarType out_dtype) {
  TORCH_CHECK(x.dim() == 2, "x must be a matrix");
  TORCH_CHECK(packed.scalar_type() == at::kChar && packed.is_contiguous() && packed.dim() == 4 &&
                  packed.size(2) == kTileRows && packed.size(3) == kChunk,
              "packed must be a contiguous int8 [tiles, chunks, 4, 64] (packing.pack_int8)");
  const int64_t m = x.size(0), n = scale.numel(), k = x.size(1);
  const int64_t k_padded = packed.size(1) * kChunk;
  TORCH_CHECK(k <= k_padded && k_padded < k + kChunk, "x and packed differ in K");
  TORCH_CHECK(packed.size(0) == (n + kTileRows - 1) / kTileRows, "packed and scale differ in N");
  TORCH_CHECK(scale.scalar_type() == at::kFloat && scale.is_contiguous(),
              "scale must be contiguous float32");
  TORCH_CHECK(row_sums.scalar_type() == at::kInt && row_sums.is_contiguous() &&
                  row_sums.numel() == packed.size(0) * kTileRows,
              "row_sums must be the packed rows' int32 sums");
  auto out = linear_output(x, bias, m, n, out_dtype);
  auto x32 = x.to(at::kFloat).contiguous();
  const Rows rows = quantize_rows(x32.data_ptr<float>(), m, k, k_padded);
  const int8_t* q = packed.data_ptr<int8_t>();
  const int32_t* sums = row_sums.data_ptr<int32_t>();
  with_output(out.y, [&](auto* y) {
    int8_rows(rows, q, sums, scale.data_ptr<float>(), out.bias, y, m, n);
  });
  return out.y;
}
