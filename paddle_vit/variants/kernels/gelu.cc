// The exact GELU, x * Phi(x) = x / 2 * (1 + erf(x / sqrt 2)), and its backward pass, float32 on a
// CPU, the elements shared out over threads (Paddle 3.3's kernels run on one):
//   forward   y = x / 2 * (1 + erf(x / sqrt 2))
//   backward  dx = dy * (1 / 2 * (1 + erf(x / sqrt 2)) + x * exp(-x^2 / 2) / sqrt(2 pi))
// erf by Abramowitz and Stegun 7.1.26 (absolute error at most 1.5e-7, within a few float32 ulps of
// 1 + erf), with vector_math.h's exp, so that the compiler vectorises both loops.
#include <cstdint>

#include "paddle/extension.h"
#include "vector_math.h"

namespace {

using paddle_vit_kernels::ExpNonPositive;
using paddle_vit_kernels::InThreads;

// erf(z) = sign(z) (1 - t (a1 + t (a2 + t (a3 + t (a4 + t a5)))) exp(-z^2)), t = 1 / (1 + p |z|)
inline float Erf(float z) {
  const float a = z < 0.0f ? -z : z;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  const float poly = t * (0.254829592f + t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  const float value = 1.0f - poly * ExpNonPositive(-a * a);
  return z < 0.0f ? -value : value;
}

constexpr float kInverseSqrt2 = 0.70710678118654752f;
constexpr float kInverseSqrt2Pi = 0.39894228040143268f;

inline float GeluOf(float x) { return 0.5f * x * (1.0f + Erf(x * kInverseSqrt2)); }

void GeluElements(const float* x, float* y, int64_t first, int64_t last) {
#pragma omp simd
  for (int64_t i = first; i < last; ++i) y[i] = GeluOf(x[i]);
}

// GELU(x + bias) in place over rows [M, W] of x, bias [W]
void BiasedGeluRows(float* x, const float* bias, int64_t first, int64_t last, int64_t width) {
  for (int64_t row = first; row < last; ++row) {
    float* x_row = x + row * width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) x_row[j] = GeluOf(x_row[j] + bias[j]);
  }
}

void GeluBackwardElements(const float* x, const float* dy, float* dx, int64_t first, int64_t last) {
#pragma omp simd
  for (int64_t i = first; i < last; ++i) {
    const float cdf = 0.5f * (1.0f + Erf(x[i] * kInverseSqrt2));
    const float pdf = kInverseSqrt2Pi * ExpNonPositive(-0.5f * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

}  // namespace

std::vector<paddle::Tensor> Gelu(const paddle::Tensor& x, int threads) {
  auto y = paddle::empty(x.shape(), x.dtype(), x.place());
  const float* in = x.data<float>();
  float* out = y.data<float>();
  InThreads(x.numel(), threads, [&](int64_t first, int64_t last) { GeluElements(in, out, first, last); });
  return {y};
}

void BiasedGeluInPlace(paddle::Tensor& x, const paddle::Tensor& bias, int threads) {
  const int64_t width = x.shape().back();
  float* data = x.data<float>();
  const float* b = bias.data<float>();
  InThreads(x.numel() / width, threads, [&](int64_t first, int64_t last) { BiasedGeluRows(data, b, first, last, width); });
}

std::vector<paddle::Tensor> GeluBackward(const paddle::Tensor& x, const paddle::Tensor& dy, int threads) {
  auto dx = paddle::empty(x.shape(), x.dtype(), x.place());
  const float* in = x.data<float>();
  const float* grad = dy.data<float>();
  float* out = dx.data<float>();
  InThreads(x.numel(), threads, [&](int64_t first, int64_t last) { GeluBackwardElements(in, grad, out, first, last); });
  return {dx};
}

PD_BUILD_OP(paddle_vit_gelu)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({"threads: int"})
    .SetKernelFn(PD_KERNEL(Gelu));

PD_BUILD_OP(paddle_vit_gelu_backward)
    .Inputs({"X", "DY"})
    .Outputs({"DX"})
    .Attrs({"threads: int"})
    .SetKernelFn(PD_KERNEL(GeluBackward));
