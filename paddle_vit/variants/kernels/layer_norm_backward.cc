// LayerNorm's backward pass over the last axis, float32 on a CPU, the rows shared out over
// threads (Paddle 3.3's own kernel runs on one). For each row of x [M, D] with the forward pass's
// mean and variance, x_hat = (x - mean) * rstd, rstd = 1 / sqrt(var + eps):
//   dx = rstd * (g * w - mean_j(g * w) - x_hat * mean_j(g * w * x_hat))
//   dw = sum over rows of g * x_hat,   db = sum over rows of g
// Each thread sums dw and db over its own block of rows; the blocks' sums are added at the end.
// The threads are started per call and joined before it returns (std::thread, not OpenMP): an
// OpenMP team's workers spin after a region and take the cores from the matrix products that run
// next (docs/benchmarks.md, "The training step against timm").
#include <algorithm>
#include <cmath>
#include <thread>
#include <vector>

#include "paddle/extension.h"

namespace {

void BackwardRows(const float* in, const float* w, const float* mu, const float* var, const float* g, float* dx,
                  float* dw, float* db, int64_t first, int64_t last, int64_t width, float epsilon) {
  for (int64_t row = first; row < last; ++row) {
    const float* x_row = in + row * width;
    const float* g_row = g + row * width;
    float* dx_row = dx + row * width;
    const float centre = mu[row];
    const float rstd = 1.0f / std::sqrt(var[row] + epsilon);
    float mean_gw = 0.0f, mean_gw_xhat = 0.0f;
#pragma omp simd reduction(+ : mean_gw, mean_gw_xhat)
    for (int64_t j = 0; j < width; ++j) {
      const float x_hat = (x_row[j] - centre) * rstd;
      const float gw = g_row[j] * w[j];
      mean_gw += gw;
      mean_gw_xhat += gw * x_hat;
      dw[j] += g_row[j] * x_hat;
      db[j] += g_row[j];
    }
    mean_gw /= width;
    mean_gw_xhat /= width;
#pragma omp simd
    for (int64_t j = 0; j < width; ++j) {
      const float x_hat = (x_row[j] - centre) * rstd;
      dx_row[j] = rstd * (g_row[j] * w[j] - mean_gw - x_hat * mean_gw_xhat);
    }
  }
}

}  // namespace

std::vector<paddle::Tensor> LayerNormBackward(const paddle::Tensor& x, const paddle::Tensor& weight,
                                              const paddle::Tensor& mean, const paddle::Tensor& variance,
                                              const paddle::Tensor& grad, float epsilon, int threads) {
  const int64_t width = x.shape().back();
  const int64_t rows = x.numel() / width;
  auto grad_x = paddle::empty(x.shape(), x.dtype(), x.place());
  auto grad_weight = paddle::empty({width}, x.dtype(), x.place());
  auto grad_bias = paddle::empty({width}, x.dtype(), x.place());
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, rows));
  std::vector<float> weight_sums(blocks * width, 0.0f), bias_sums(blocks * width, 0.0f);
  auto block = [&](int64_t b) {
    BackwardRows(x.data<float>(), weight.data<float>(), mean.data<float>(), variance.data<float>(),
                 grad.data<float>(), grad_x.data<float>(), weight_sums.data() + b * width,
                 bias_sums.data() + b * width, rows * b / blocks, rows * (b + 1) / blocks, width, epsilon);
  };
  std::vector<std::thread> workers;
  for (int64_t b = 1; b < blocks; ++b) workers.emplace_back(block, b);
  block(0);
  for (auto& worker : workers) worker.join();
  float* dw_out = grad_weight.data<float>();
  float* db_out = grad_bias.data<float>();
  for (int64_t j = 0; j < width; ++j) {
    float dw_total = 0.0f, db_total = 0.0f;
    for (int64_t b = 0; b < blocks; ++b) {
      dw_total += weight_sums[b * width + j];
      db_total += bias_sums[b * width + j];
    }
    dw_out[j] = dw_total;
    db_out[j] = db_total;
  }
  return {grad_x, grad_weight, grad_bias};
}

PD_BUILD_OP(paddle_vit_layer_norm_backward)
    .Inputs({"X", "Weight", "Mean", "Variance", "Grad"})
    .Outputs({"GradX", "GradWeight", "GradBias"})
    .Attrs({"epsilon: float", "threads: int"})
    .SetKernelFn(PD_KERNEL(LayerNormBackward));
