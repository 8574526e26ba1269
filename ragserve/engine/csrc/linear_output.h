// What the linear kernels share around their arithmetic: the bias as float32 and y in the
// requested dtype, and a call of the kernel with y's element type.
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>

#include <c10/util/BFloat16.h>

struct LinearOutput {
  at::Tensor bias32;   // holds the float32 bias that `bias` points into
  const float* bias;   // null without a bias
  at::Tensor y;        // [m, n] in out_dtype
};

static inline LinearOutput linear_output(const at::Tensor& x, const c10::optional<at::Tensor>& bias,
                                         int64_t m, int64_t n, at::ScalarType out_dtype) {
  TORCH_CHECK(out_dtype == at::kFloat || out_dtype == at::kBFloat16,
              "out_dtype must be float32 or bfloat16");
  LinearOutput out{at::Tensor(), nullptr, at::empty({m, n}, x.options().dtype(out_dtype))};
  if (bias.has_value()) {
    TORCH_CHECK(bias->numel() == n, "bias must have N elements");
    out.bias32 = bias->to(at::kFloat).contiguous();
    out.bias = out.bias32.data_ptr<float>();
  }
  return out;
}

// run(pointer to y's elements), as float* or c10::BFloat16*.
template <typename Run>
static inline void with_output(at::Tensor& y, Run&& run) {
  if (y.scalar_type() == at::kBFloat16)
    run(y.data_ptr<at::BFloat16>());
  else
    run(y.data_ptr<float>());
}
