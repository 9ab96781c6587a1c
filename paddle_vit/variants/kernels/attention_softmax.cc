// The attention's softmax over the last axis and its backward pass, float32 on a CPU, the rows
// shared out over threads (Paddle 3.3's softmax runs on one thread and its backward is four
// elementwise passes with three temporaries):
//   forward   p = exp(s - max_j s) / sum_j exp(s - max_j s)
//   backward  ds = p * (dp - sum_j dp * p)
// exp is vector_math.h's, and so is the sharing of the rows out over threads.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "paddle/extension.h"
#include "vector_math.h"

namespace {

using paddle_vit_kernels::ExpNonPositive;
using paddle_vit_kernels::InThreads;

void SoftmaxRows(const float* in, float* out, int64_t first, int64_t last, int64_t width) {
  for (int64_t row = first; row < last; ++row) {
    const float* x = in + row * width;
    float* y = out + row * width;
    float largest = x[0];
#pragma omp simd reduction(max : largest)
    for (int64_t j = 0; j < width; ++j) largest = largest > x[j] ? largest : x[j];  // std::max is not vectorised
    float total = 0.0f;
#pragma omp simd reduction(+ : total)
    for (int64_t j = 0; j < width; ++j) {
      y[j] = ExpNonPositive(x[j] - largest);
      total += y[j];
    }
    const float inverse = 1.0f / total;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) y[j] *= inverse;
  }
}

void SoftmaxBackwardRows(const float* p, const float* dp, float* ds, int64_t first, int64_t last, int64_t width) {
  for (int64_t row = first; row < last; ++row) {
    const float* p_row = p + row * width;
    const float* dp_row = dp + row * width;
    float* ds_row = ds + row * width;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (int64_t j = 0; j < width; ++j) dot += dp_row[j] * p_row[j];
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) ds_row[j] = p_row[j] * (dp_row[j] - dot);
  }
}

}  // namespace

std::vector<paddle::Tensor> Softmax(const paddle::Tensor& x, int threads) {
  const int64_t width = x.shape().back();
  const int64_t rows = x.numel() / width;
  auto out = paddle::empty(x.shape(), x.dtype(), x.place());
  const float* in = x.data<float>();
  float* y = out.data<float>();
  InThreads(rows, threads, [&](int64_t first, int64_t last) { SoftmaxRows(in, y, first, last, width); });
  return {out};
}

void SoftmaxInPlace(paddle::Tensor& x, int threads) {
  const int64_t width = x.shape().back();
  float* data = x.data<float>();
  InThreads(x.numel() / width, threads, [&](int64_t first, int64_t last) { SoftmaxRows(data, data, first, last, width); });
}

std::vector<paddle::Tensor> SoftmaxBackward(const paddle::Tensor& p, const paddle::Tensor& dp, int threads) {
  const int64_t width = p.shape().back();
  const int64_t rows = p.numel() / width;
  auto ds = paddle::empty(p.shape(), p.dtype(), p.place());
  const float* p_data = p.data<float>();
  const float* dp_data = dp.data<float>();
  float* ds_data = ds.data<float>();
  InThreads(rows, threads,
            [&](int64_t first, int64_t last) { SoftmaxBackwardRows(p_data, dp_data, ds_data, first, last, width); });
  return {ds};
}

PD_BUILD_OP(paddle_vit_softmax)
    .Inputs({"X"})
    .Outputs({"Out"})
    .Attrs({"threads: int"})
    .SetKernelFn(PD_KERNEL(Softmax));

PD_BUILD_OP(paddle_vit_softmax_backward)
    .Inputs({"P", "DP"})
    .Outputs({"DS"})
    .Attrs({"threads: int"})
    .SetKernelFn(PD_KERNEL(SoftmaxBackward));
