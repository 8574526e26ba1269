// bfloat16 is the top half of a float32, so widening is an exact shift that, unlike
// c10::BFloat16's conversion, vectorizes. float widens to itself and int8 (a quantized KV cache)
// to its value, so kernels can be written once for every dtype. Also the AVX2 lane sum the
// kernels share.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

static inline float widen(float x) { return x; }

static inline float widen(int8_t x) { return float(x); }

// Kernels dispatched over every floating type compile for double too, which would otherwise
// convert as readily to int8_t as to float.
static inline float widen(double x) { return float(x); }

static inline float widen(c10::BFloat16 x) {
  uint32_t bits = uint32_t(reinterpret_cast<const uint16_t&>(x)) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}

#if defined(__AVX2__) && defined(__FMA__)
#include <immintrin.h>

// Eight consecutive values as float32 lanes.
static inline __m256 load8(const float* p) { return _mm256_loadu_ps(p); }

static inline __m256 load8(const int8_t* p) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(bytes));
}

static inline __m256 load8(const c10::BFloat16* p) {
  const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
}

// The sum of the eight lanes, in one fixed order.
static inline float sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
#endif

#if defined(__AVX512F__)
// Sixteen consecutive values as float32 lanes.
static inline __m512 load16(const float* p) { return _mm512_loadu_ps(p); }

static inline __m512 load16(const int8_t* p) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(bytes));
}

static inline __m512 load16(const c10::BFloat16* p) {
  const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

// The lane sums of four vectors, lane i of the result holding v_i's: 13 instructions where four
// separate sums take about 32, which at a few rows cost as much as the dot products themselves.
// Each vector goes through the same tree of additions whatever its neighbours, so its sum does
// not depend on them.
static inline __m256 halves(__m512 v) {
  const __m256 high = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  return _mm256_add_ps(_mm512_castps512_ps256(v), high);
}

static inline __m128 sum4x16(__m512 v0, __m512 v1, __m512 v2, __m512 v3) {
  const __m256 pairs01 = _mm256_hadd_ps(halves(v0), halves(v1));
  const __m256 pairs23 = _mm256_hadd_ps(halves(v2), halves(v3));
  const __m256 quads = _mm256_hadd_ps(pairs01, pairs23);
  return _mm_add_ps(_mm256_castps256_ps128(quads), _mm256_extractf128_ps(quads, 1));
}
#endif
