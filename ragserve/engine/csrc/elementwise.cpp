// A decoder layer's element-wise work, each in one pass over the rows: the residual add with
// the RMSNorm that follows it, RoPE on q and k in place, and SiLU(gate) * up. In PyTorch each
// is 3 to 8 ops per layer, and at decode sizes their dispatch costs more than their arithmetic.
//
// Arithmetic is float32. bfloat16 results are rounded (to nearest even) where PyTorch's
// bfloat16 ops round: the residual sum, the normalized row, and the product with the weight.
#include <ATen/core/Tensor.h>
#include <ATen/Dispatch.h>
#include <ATen/ops/empty_like.h>
#include <ATen/ops/empty.h>
#include <ATen/Parallel.h>

#include "widen.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

// Elements below which rows are not split across threads.
constexpr int64_t kMinThreadElems = 1 << 15;
// The largest x whose e^x float32 holds.
constexpr float kExpLimit = 88.3762626647949f;

// The value a PyTorch op of this dtype would store.
template <typename scalar_t>
static inline float stored(float x) {
  return widen(scalar_t(x));
}

static inline int64_t row_grain(int64_t row_elems) {
  return std::max<int64_t>(1, kMinThreadElems / std::max<int64_t>(1, row_elems));
}

template <typename scalar_t>
static void add_rms_norm_rows(scalar_t* hidden, const scalar_t* delta, const scalar_t* weight,
                              scalar_t* out, int64_t rows, int64_t size, float eps) {
  at::parallel_for(0, rows, row_grain(size), [&](int64_t begin, int64_t end) {
    std::vector<float> row(size);
    for (int64_t r = begin; r < end; ++r) {
      scalar_t* h = hidden + r * size;
      float sum_squares = 0.0f;
      for (int64_t i = 0; i < size; ++i) {
        float value = widen(h[i]);
        if (delta) {
          value = stored<scalar_t>(value + widen(delta[r * size + i]));
          h[i] = scalar_t(value);
        }
        row[i] = value;
        sum_squares += value * value;
      }
      const float inv_rms = 1.0f / std::sqrt(sum_squares / float(size) + eps);
      scalar_t* o = out + r * size;
      for (int64_t i = 0; i < size; ++i)
        o[i] = scalar_t(widen(weight[i]) * stored<scalar_t>(row[i] * inv_rms));
    }
  });
}

template <typename scalar_t>
static void rope_rows(scalar_t* x, int64_t row_stride, const int64_t* positions,
                      const float* cos_table, const float* sin_table, int64_t rows,
                      int64_t heads, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  at::parallel_for(0, rows, row_grain(heads * head_dim), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* cos = cos_table + positions[r] * head_dim;
      const float* sin = sin_table + positions[r] * head_dim;
      for (int64_t h = 0; h < heads; ++h) {
        scalar_t* v = x + r * row_stride + h * head_dim;
        for (int64_t i = 0; i < half; ++i) {
          const float first = widen(v[i]);
          const float second = widen(v[i + half]);
          v[i] = scalar_t(first * cos[i] - second * sin[i]);
          v[i + half] = scalar_t(second * cos[i + half] + first * sin[i + half]);
        }
      }
    }
  });
}

template <typename scalar_t>
static void silu_mul_rows(const scalar_t* gate_up, scalar_t* out, int64_t rows, int64_t size) {
  at::parallel_for(0, rows, row_grain(2 * size), [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const scalar_t* gate = gate_up + r * 2 * size;
      const scalar_t* up = gate + size;
      for (int64_t i = 0; i < size; ++i) {
        const float g = widen(gate[i]);
        // e^-g held finite: past float32's range, fast math's reciprocal of an infinite
        // 1 + e^-g times g made NaN where SiLU is about 0.
        const float e = std::exp(std::min(-g, kExpLimit));
        out[r * size + i] = scalar_t(stored<scalar_t>(g / (1.0f + e)) * widen(up[i]));
      }
    }
  });
}

#if defined(__AVX512BF16__) && defined(__AVX512BW__)
#include <immintrin.h>

// SiLU(gate) * up of bfloat16 rows with AVX-512 BF16: sixteen lanes at a time, a row's last
// lanes masked, so that every element goes through the same arithmetic wherever it stands in
// its row, rounded by the CPU's conversion (to nearest even, as c10's). The compiler's vectors
// of the loop above, with glibc's vector exp, took 1.4× as long at 32 and 512 rows (a decode
// step of 32 sequences, a prompt chunk; Intel Xeon with AMX).
static inline __mmask16 lanes(int64_t left) {
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1);
}

static inline __m512 load16(const c10::BFloat16* p, __mmask16 mask) {
  const __m256i half = _mm256_maskz_loadu_epi16(mask, p);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
}

static inline void store16(c10::BFloat16* p, __m512 v, __mmask16 mask) {
  _mm256_mask_storeu_epi16(p, mask, (__m256i)_mm512_cvtneps_pbh(v));
}

// v rounded to bfloat16, as float32 lanes: what a PyTorch op of that dtype would store.
static inline __m512 stored16(__m512 v) {
  const __m256i narrow = (__m256i)_mm512_cvtneps_pbh(v);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(narrow), 16));
}

// e^x: 2^n e^r with |r| <= ln 2 / 2 and e^r Cephes' single-precision polynomial (relative
// error about 1e-7, far below a bfloat16 result's 4e-3).
static inline __m512 exp16(__m512 x) {
  const __m512 limit = _mm512_set1_ps(kExpLimit);
  x = _mm512_max_ps(_mm512_min_ps(x, limit), _mm512_sub_ps(_mm512_setzero_ps(), limit));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  return _mm512_scalef_ps(p, n);
}

static void silu_mul_rows(const c10::BFloat16* gate_up, c10::BFloat16* out, int64_t rows,
                          int64_t size) {
  at::parallel_for(0, rows, row_grain(2 * size), [&](int64_t begin, int64_t end) {
    const __m512 one = _mm512_set1_ps(1.0f), two = _mm512_set1_ps(2.0f);
    for (int64_t r = begin; r < end; ++r) {
      const c10::BFloat16* gate = gate_up + r * 2 * size;
      const c10::BFloat16* up = gate + size;
      c10::BFloat16* row_out = out + r * size;
      for (int64_t i = 0; i < size; i += 16) {
        const __mmask16 mask = lanes(size - i);
        const __m512 g = load16(gate + i, mask);
        const __m512 e = exp16(_mm512_sub_ps(_mm512_setzero_ps(), g));
        // 1 / (1 + e) from the reciprocal estimate and a Newton step (relative error about
        // 1e-8): a division took 7% longer over the whole function.
        const __m512 denominator = _mm512_add_ps(one, e);
        const __m512 estimate = _mm512_rcp14_ps(denominator);
        const __m512 inverse =
            _mm512_mul_ps(estimate, _mm512_fnmadd_ps(denominator, estimate, two));
        const __m512 silu = stored16(_mm512_mul_ps(g, inverse));
        store16(row_out + i, _mm512_mul_ps(silu, load16(up + i, mask)), mask);
      }
    }
  });
}
#endif

static void check_rows(const at::Tensor& x, const char* name) {
  TORCH_CHECK(x.dim() == 2 && x.stride(1) == 1, name, " must be a matrix with unit column stride");
  TORCH_CHECK(x.scalar_type() == at::kFloat || x.scalar_type() == at::kBFloat16, name,
              " must be float32 or bfloat16");
}

}  // namespace

// hidden += delta (when given, in place); returns RMSNorm(hidden) * weight.
at::Tensor add_rms_norm(at::Tensor hidden, c10::optional<at::Tensor> delta, at::Tensor weight,
                        double eps) {
  check_rows(hidden, "hidden");
  TORCH_CHECK(hidden.is_contiguous() && weight.is_contiguous(), "hidden and weight contiguous");
  TORCH_CHECK(weight.numel() == hidden.size(1) && weight.scalar_type() == hidden.scalar_type(),
              "weight must match hidden's width and dtype");
  at::Tensor delta_rows;
  if (delta.has_value()) {
    delta_rows = delta->contiguous();
    TORCH_CHECK(delta_rows.sizes() == hidden.sizes(), "delta must match hidden's shape");
    TORCH_CHECK(delta_rows.scalar_type() == hidden.scalar_type(), "delta's dtype differs");
  }
  auto out = at::empty_like(hidden);
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, hidden.scalar_type(), "add_rms_norm", [&] {
    add_rms_norm_rows(hidden.data_ptr<scalar_t>(),
                      delta.has_value() ? delta_rows.data_ptr<scalar_t>() : nullptr,
                      weight.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), hidden.size(0),
                      hidden.size(1), float(eps));
  });
  return out;
}

// Rotates the first `heads` heads of every row of x in place (q then k heads of a fused qkv
// row); cos_sin is [2, positions, head_dim] float32.
void rope_in_place(at::Tensor x, at::Tensor positions, at::Tensor cos_sin,
                   int64_t heads, int64_t head_dim) {
  check_rows(x, "x");
  TORCH_CHECK(heads * head_dim <= x.size(1) && head_dim % 2 == 0, "bad heads or head_dim");
  TORCH_CHECK(positions.scalar_type() == at::kLong && positions.numel() == x.size(0),
              "positions must be int64, one per row");
  TORCH_CHECK(cos_sin.scalar_type() == at::kFloat && cos_sin.is_contiguous() &&
                  cos_sin.dim() == 3 && cos_sin.size(2) == head_dim,
              "cos_sin must be contiguous float32 [2, positions, head_dim]");
  auto pos = positions.contiguous();
  const int64_t* pos_ptr = pos.data_ptr<int64_t>();
  for (int64_t r = 0; r < pos.numel(); ++r)
    TORCH_CHECK(pos_ptr[r] >= 0 && pos_ptr[r] < cos_sin.size(1), "position out of range");
  const float* table = cos_sin.data_ptr<float>();
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, x.scalar_type(), "rope_in_place", [&] {
    rope_rows(x.data_ptr<scalar_t>(), x.stride(0), pos_ptr, table,
              table + cos_sin.size(1) * head_dim, x.size(0), heads, head_dim);
  });
}

// gate_up [rows, 2 * size] -> SiLU(gate) * up [rows, size].
at::Tensor silu_mul(at::Tensor gate_up) {
  check_rows(gate_up, "gate_up");
  TORCH_CHECK(gate_up.size(1) % 2 == 0, "gate_up must have an even width");
  auto rows = gate_up.contiguous();
  auto out = at::empty({rows.size(0), rows.size(1) / 2}, rows.options());
  AT_DISPATCH_FLOATING_TYPES_AND(at::kBFloat16, rows.scalar_type(), "silu_mul", [&] {
    silu_mul_rows(rows.data_ptr<scalar_t>(), out.data_ptr<scalar_t>(), rows.size(0),
                  rows.size(1) / 2);
  });
  return out;
}
