// bfloat16 is the top half of a float32, so widening is an exact shift that, unlike
// c10::BFloat16's conversion, vectorizes. float widens to itself, so kernels can be written once
// for both dtypes.
#pragma once

#include <c10/util/BFloat16.h>

#include <cstdint>
#include <cstring>

static inline float widen(float x) { return x; }

static inline float widen(c10::BFloat16 x) {
  uint32_t bits = uint32_t(reinterpret_cast<const uint16_t&>(x)) << 16;
  float out;
  std::memcpy(&out, &bits, sizeof(out));
  return out;
}
