// The attention's softmax over the last axis and its backward pass, float32 on a CPU, the rows
// shared out over threads (Paddle 3.3's softmax runs on one thread and its backward is four
// elementwise passes with three temporaries):
//   forward   p = exp(s - max_j s) / sum_j exp(s - max_j s)
//   backward  ds = p * (dp - sum_j dp * p)
// exp is Cephes' single-precision polynomial (about 1 ulp), written out so that the compiler
// vectorises it without a vector math library or -ffast-math (-fno-trapping-math is enough). The threads are started per call
// and joined before it returns, as in layer_norm_backward.cc.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "paddle/extension.h"

namespace {

// exp(x) for x <= 0 (a row's entry less its maximum); below -87 it is exp(-87), about 1.6e-38,
// where the true value is nearer 0: nothing a sum of at least 1 can tell apart.
inline float ExpNonPositive(float x) {
  x = x < -87.0f ? -87.0f : x;  // a select the compiler vectorises (with -fno-trapping-math)
  // x = n ln2 + r, |r| <= ln2 / 2; n rounded to nearest by adding and taking away 1.5 * 2^23
  const float n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const float r = x - n * 0.693359375f + n * 2.12194440e-4f;   // ln2 in two parts (Cody and Waite)
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float e = p * r * r + r + 1.0f;
  const int32_t bits = (static_cast<int32_t>(n) + 127) << 23;  // 2^n, n >= -126 here
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return e * scale;
}

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

template <typename Rows>
void InThreads(int64_t rows, int threads, Rows work) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, rows));
  std::vector<std::thread> workers;
  for (int64_t b = 1; b < blocks; ++b) workers.emplace_back(work, rows * b / blocks, rows * (b + 1) / blocks);
  work(0, rows / blocks);
  for (auto& worker : workers) worker.join();
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
