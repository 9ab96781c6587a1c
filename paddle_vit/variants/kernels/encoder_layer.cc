// A whole pre-norm encoder layer of training, float32 on a CPU, as one op forward and one op
// backward (the walkthrough's EncoderLayer without dropout or layer scale):
//   x1  = x + keep1 * proj(attention(qkv(LN1(x))))     attention = softmax(q k^T * scale) v, H heads
//   out = x1 + keep2 * fc2(GELU(fc1(LN2(x1))))
// keep1 and keep2 [B]: drop path's factor of each sample's branch (0 or 1 / keep probability; 1
// without drop path), drawn by the caller as its DropPath module draws them.
// Why: the same products (Paddle's matmul and addmm, called from here) and the same kernels
// (softmax, GELU, LayerNorm's backward pass: the other sources), but no Python between them.
// Eager Paddle runs each op from Python holding the GIL, so two threads stepping halves of a batch
// (batch_threads.py) handed the GIL to and fro about a thousand times a step; an op runs without
// it. Kept for the backward pass: q (scaled), k and v, the attention weights, the heads' merged
// output, x1, fc1's output and the GELU's, and the two LayerNorms' row means and variances; the
// LayerNorms' outputs are computed again there (cheap: one pass over [M, D]). Computing the
// weights and the GELU's output again too held less but cost 3% of a ViT-Ti/16 step.
// In evaluation (EncoderLayerInference) the same layer keeps nothing: the products without their
// bias (Paddle's addmm costs 10% over matmul at these shapes), each bias added by the pass that
// reads the product's output (the heads' split, the GELU, the residual's add), the softmax and
// the GELU in place.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels.h"
#include "paddle/extension.h"
#include "vector_math.h"

namespace {

using paddle::Tensor;
using paddle_vit_kernels::InThreads;

Tensor Empty(const std::vector<int64_t>& shape, const Tensor& like) {
  return paddle::empty(shape, like.dtype(), like.place());
}

// Each row's mean and (biased) variance of x [M, D], as LayerNorm's forward pass keeps them.
void RowStatistics(const float* x, float* mean, float* variance, int64_t rows, int64_t width, int threads) {
  InThreads(rows, threads, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      const float* x_row = x + row * width;
      float total = 0.0f;
#pragma omp simd reduction(+ : total)
      for (int64_t j = 0; j < width; ++j) total += x_row[j];
      const float centre = total / width;
      float squares = 0.0f;
#pragma omp simd reduction(+ : squares)
      for (int64_t j = 0; j < width; ++j) squares += (x_row[j] - centre) * (x_row[j] - centre);
      mean[row] = centre;
      variance[row] = squares / width;
    }
  });
}

// LayerNorm's output from the rows' statistics: out = (x - mean) / sqrt(variance + eps) * w + b.
void NormaliseRows(const float* x, const float* w, const float* b, const float* mean, const float* variance,
                   float* out, int64_t rows, int64_t width, float epsilon, int threads) {
  InThreads(rows, threads, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      const float* x_row = x + row * width;
      float* out_row = out + row * width;
      const float centre = mean[row];
      const float rstd = 1.0f / std::sqrt(variance[row] + epsilon);
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) out_row[j] = (x_row[j] - centre) * rstd * w[j] + b[j];
    }
  });
}

// LN(x) [M, D] of x [..., D] from its statistics: a fresh tensor
Tensor Normalised(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& mean, const Tensor& variance,
                  float epsilon, int threads) {
  const int64_t width = x.shape().back(), rows = x.numel() / width;
  Tensor out = Empty({rows, width}, x);
  NormaliseRows(x.data<float>(), w.data<float>(), b.data<float>(), mean.data<float>(), variance.data<float>(),
                out.data<float>(), rows, width, epsilon, threads);
  return out;
}

// out = a + b elementwise over `count` numbers
void AddInto(const float* a, const float* b, float* out, int64_t count, int threads) {
  InThreads(count, threads, [&](int64_t first, int64_t last) {
#pragma omp simd
    for (int64_t i = first; i < last; ++i) out[i] = a[i] + b[i];
  });
}

// out = a + factor[sample] * b over [B, rows of a sample]: a residual and its branch under drop path
void AddScaledInto(const float* a, const float* b, const float* factors, float* out, int64_t samples,
                   int64_t per_sample, int threads) {
  InThreads(samples * per_sample, threads, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last;) {
      const int64_t sample = i / per_sample, end = std::min(last, (sample + 1) * per_sample);
      const float factor = factors[sample];
#pragma omp simd
      for (int64_t j = i; j < end; ++j) out[j] = a[j] + factor * b[j];
      i = end;
    }
  });
}

// factor[sample] * g as a fresh [M, W] tensor (M = B x rows of a sample): a branch's gradient under drop path
Tensor ScaledBySample(const Tensor& g, const Tensor& factors, int64_t samples, int threads) {
  const int64_t width = g.shape().back(), rows = g.numel() / width, per_sample = g.numel() / samples;
  Tensor out = paddle::empty({rows, width}, g.dtype(), g.place());
  const float* in = g.data<float>();
  const float* factor = factors.data<float>();
  float* result = out.data<float>();
  InThreads(g.numel(), threads, [&](int64_t first, int64_t last) {
    for (int64_t i = first; i < last;) {
      const int64_t sample = i / per_sample, end = std::min(last, (sample + 1) * per_sample);
#pragma omp simd
      for (int64_t j = i; j < end; ++j) result[j] = factor[sample] * in[j];
      i = end;
    }
  });
  return out;
}

// The column sums of g [M, W] (a bias's gradient): each thread sums its block of rows, the blocks
// added at the end.
Tensor ColumnSums(const Tensor& g, int threads) {
  const int64_t width = g.shape().back();
  const int64_t rows = g.numel() / width;
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, rows));
  std::vector<float> partial(blocks * width, 0.0f);
  const float* data = g.data<float>();
  InThreads(blocks, static_cast<int>(blocks), [&](int64_t first, int64_t last) {
    for (int64_t block = first; block < last; ++block) {
      float* sums = partial.data() + block * width;
      for (int64_t row = rows * block / blocks; row < rows * (block + 1) / blocks; ++row) {
        const float* g_row = data + row * width;
#pragma omp simd
        for (int64_t j = 0; j < width; ++j) sums[j] += g_row[j];
      }
    }
  });
  Tensor out = Empty({width}, g);
  float* result = out.data<float>();
  for (int64_t j = 0; j < width; ++j) {
    float total = 0.0f;
    for (int64_t block = 0; block < blocks; ++block) total += partial[block * width + j];
    result[j] = total;
  }
  return out;
}

// Token-major [B, N, parts, H, d] (rows of the packed projection) <-> head-major parts x [B, H, N, d],
// the first part multiplied by first_scale on the way.
struct HeadLayout {
  int64_t batch, tokens, heads, head_dim;
  int64_t Width() const { return heads * head_dim; }
};

// copy(part, packed, split, factor) for each head of each token of each part: packed is the offset
// of its head_dim values in the token-major rows, split in the part's head-major tensor.
template <typename Copy>
void ForEachHeadRow(const HeadLayout& shape, int64_t count, float first_scale, int threads, Copy copy) {
  const int64_t row_width = count * shape.Width();
  InThreads(shape.batch * shape.tokens, threads, [&](int64_t first, int64_t last) {
    for (int64_t token_row = first; token_row < last; ++token_row) {
      const int64_t b = token_row / shape.tokens, n = token_row % shape.tokens;
      for (int64_t part = 0; part < count; ++part) {
        const float factor = part == 0 ? first_scale : 1.0f;
        for (int64_t h = 0; h < shape.heads; ++h) {
          copy(part, token_row * row_width + (part * shape.heads + h) * shape.head_dim,
               ((b * shape.heads + h) * shape.tokens + n) * shape.head_dim, factor);
        }
      }
    }
  });
}

inline void ScaledCopy(const float* from, float* to, int64_t count, float factor) {
#pragma omp simd
  for (int64_t j = 0; j < count; ++j) to[j] = from[j] * factor;
}

void ToHeads(const float* rows, const std::vector<float*>& parts, float first_scale, const HeadLayout& shape,
             int threads) {
  ForEachHeadRow(shape, static_cast<int64_t>(parts.size()), first_scale, threads,
                 [&](int64_t part, int64_t packed, int64_t split, float factor) {
                   ScaledCopy(rows + packed, parts[part] + split, shape.head_dim, factor);
                 });
}

void FromHeads(const std::vector<const float*>& parts, float* rows, float first_scale, const HeadLayout& shape,
               int threads) {
  ForEachHeadRow(shape, static_cast<int64_t>(parts.size()), first_scale, threads,
                 [&](int64_t part, int64_t packed, int64_t split, float factor) {
                   ScaledCopy(parts[part] + split, rows + packed, shape.head_dim, factor);
                 });
}

// q, k, v [B, H, N, d] from the packed projection's rows [M, 3 D] before its bias: each part's bias
// added, q's then scaled, as the modules compute (x W + b) * scale
void ToHeadsBiased(const float* rows, const float* bias, const std::vector<float*>& parts, float first_scale,
                   const HeadLayout& shape, int threads) {
  const int64_t row_width = static_cast<int64_t>(parts.size()) * shape.Width();
  ForEachHeadRow(shape, static_cast<int64_t>(parts.size()), first_scale, threads,
                 [&](int64_t part, int64_t packed, int64_t split, float factor) {
                   const float* from = rows + packed;
                   const float* b = bias + packed % row_width;
                   float* to = parts[part] + split;
#pragma omp simd
                   for (int64_t j = 0; j < shape.head_dim; ++j) to[j] = (from[j] + b[j]) * factor;
                 });
}

// out = residual + (branch + bias) over rows [M, W], bias [W]: a branch's product finished and added
void AddBiasedBranchInto(const float* residual, const float* branch, const float* bias, float* out, int64_t rows,
                         int64_t width, int threads) {
  InThreads(rows, threads, [&](int64_t first, int64_t last) {
    for (int64_t row = first; row < last; ++row) {
      const float* a = residual + row * width;
      const float* y = branch + row * width;
      float* o = out + row * width;
#pragma omp simd
      for (int64_t j = 0; j < width; ++j) o[j] = a[j] + (y[j] + bias[j]);
    }
  });
}

HeadLayout LayoutOf(const Tensor& x, int heads) {
  const auto& shape = x.shape();  // [B, N, D]
  return {shape[0], shape[1], heads, shape[2] / heads};
}

}  // namespace

std::vector<Tensor> EncoderLayerForward(const Tensor& x, const Tensor& ln1_w, const Tensor& ln1_b,
                                        const Tensor& qkv_w, const Tensor& qkv_b, const Tensor& proj_w,
                                        const Tensor& proj_b, const Tensor& ln2_w, const Tensor& ln2_b,
                                        const Tensor& fc1_w, const Tensor& fc1_b, const Tensor& fc2_w,
                                        const Tensor& fc2_b, const Tensor& keep1, const Tensor& keep2, int heads,
                                        float scale, float epsilon, int threads) {
  const HeadLayout layout = LayoutOf(x, heads);
  const int64_t rows = layout.batch * layout.tokens, width = layout.Width();
  Tensor mean1 = Empty({rows}, x), variance1 = Empty({rows}, x);
  RowStatistics(x.data<float>(), mean1.data<float>(), variance1.data<float>(), rows, width, threads);
  Tensor qkv = paddle::experimental::addmm(qkv_b, Normalised(x, ln1_w, ln1_b, mean1, variance1, epsilon, threads), qkv_w);  // [M, 3 D]
  const std::vector<int64_t> head_shape = {layout.batch, heads, layout.tokens, layout.head_dim};
  Tensor q = Empty(head_shape, x), k = Empty(head_shape, x), v = Empty(head_shape, x);  // [B, H, N, d]
  ToHeads(qkv.data<float>(), {q.data<float>(), k.data<float>(), v.data<float>()}, scale, layout, threads);
  Tensor weights = Softmax(paddle::experimental::matmul(q, k, false, true), threads)[0];  // [B, H, N, N]
  Tensor heads_out = paddle::experimental::matmul(weights, v);  // [B, H, N, d]
  Tensor attended = Empty({rows, width}, x);  // [M, D]
  FromHeads({heads_out.data<float>()}, attended.data<float>(), 1.0f, layout, threads);
  Tensor projected = paddle::experimental::addmm(proj_b, attended, proj_w);  // [M, D]
  Tensor x1 = Empty(x.shape(), x);
  AddScaledInto(x.data<float>(), projected.data<float>(), keep1.data<float>(), x1.data<float>(), layout.batch,
                layout.tokens * width, threads);
  Tensor mean2 = Empty({rows}, x), variance2 = Empty({rows}, x);
  RowStatistics(x1.data<float>(), mean2.data<float>(), variance2.data<float>(), rows, width, threads);
  Tensor hidden = paddle::experimental::addmm(fc1_b, Normalised(x1, ln2_w, ln2_b, mean2, variance2, epsilon, threads), fc1_w);  // [M, Dh]
  Tensor activated = Gelu(hidden, threads)[0];  // [M, Dh]
  Tensor mlp_out = paddle::experimental::addmm(fc2_b, activated, fc2_w);  // [M, D]
  Tensor out = Empty(x.shape(), x);
  AddScaledInto(x1.data<float>(), mlp_out.data<float>(), keep2.data<float>(), out.data<float>(), layout.batch,
                layout.tokens * width, threads);
  return {out, q, k, v, attended, x1, hidden, mean1, variance1, mean2, variance2, weights, activated};
}

// The same layer in evaluation, [B, N, D] -> [B, N, D]: nothing kept for a backward pass.
std::vector<Tensor> EncoderLayerInference(const Tensor& x, const Tensor& ln1_w, const Tensor& ln1_b,
                                          const Tensor& qkv_w, const Tensor& qkv_b, const Tensor& proj_w,
                                          const Tensor& proj_b, const Tensor& ln2_w, const Tensor& ln2_b,
                                          const Tensor& fc1_w, const Tensor& fc1_b, const Tensor& fc2_w,
                                          const Tensor& fc2_b, int heads, float scale, float epsilon, int threads) {
  const HeadLayout layout = LayoutOf(x, heads);
  const int64_t rows = layout.batch * layout.tokens, width = layout.Width();
  Tensor mean = Empty({rows}, x), variance = Empty({rows}, x);
  RowStatistics(x.data<float>(), mean.data<float>(), variance.data<float>(), rows, width, threads);
  Tensor qkv = paddle::experimental::matmul(Normalised(x, ln1_w, ln1_b, mean, variance, epsilon, threads), qkv_w);  // [M, 3 D]
  const std::vector<int64_t> head_shape = {layout.batch, heads, layout.tokens, layout.head_dim};
  Tensor q = Empty(head_shape, x), k = Empty(head_shape, x), v = Empty(head_shape, x);  // [B, H, N, d]
  ToHeadsBiased(qkv.data<float>(), qkv_b.data<float>(), {q.data<float>(), k.data<float>(), v.data<float>()}, scale,
                layout, threads);
  Tensor weights = paddle::experimental::matmul(q, k, false, true);  // [B, H, N, N]
  SoftmaxInPlace(weights, threads);
  Tensor heads_out = paddle::experimental::matmul(weights, v);  // [B, H, N, d]
  Tensor attended = Empty({rows, width}, x);  // [M, D]
  FromHeads({heads_out.data<float>()}, attended.data<float>(), 1.0f, layout, threads);
  Tensor projected = paddle::experimental::matmul(attended, proj_w);  // [M, D], before its bias
  Tensor x1 = Empty(x.shape(), x);
  AddBiasedBranchInto(x.data<float>(), projected.data<float>(), proj_b.data<float>(), x1.data<float>(), rows, width,
                      threads);
  RowStatistics(x1.data<float>(), mean.data<float>(), variance.data<float>(), rows, width, threads);
  Tensor hidden = paddle::experimental::matmul(Normalised(x1, ln2_w, ln2_b, mean, variance, epsilon, threads), fc1_w);  // [M, Dh]
  BiasedGeluInPlace(hidden, fc1_b, threads);
  Tensor mlp_out = paddle::experimental::matmul(hidden, fc2_w);  // [M, D], before its bias
  Tensor out = Empty(x.shape(), x);
  AddBiasedBranchInto(x1.data<float>(), mlp_out.data<float>(), fc2_b.data<float>(), out.data<float>(), rows, width,
                      threads);
  return {out};
}

std::vector<Tensor> EncoderLayerBackward(const Tensor& x, const Tensor& ln1_w, const Tensor& ln1_b,
                                         const Tensor& qkv_w, const Tensor& proj_w, const Tensor& ln2_w,
                                         const Tensor& ln2_b, const Tensor& fc1_w, const Tensor& fc2_w,
                                         const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attended,
                                         const Tensor& x1, const Tensor& hidden, const Tensor& mean1,
                                         const Tensor& variance1, const Tensor& mean2, const Tensor& variance2,
                                         const Tensor& weights, const Tensor& activated, const Tensor& keep1,
                                         const Tensor& keep2, const Tensor& grad_out, int heads, float scale,
                                         float epsilon, int threads) {
  const HeadLayout layout = LayoutOf(x, heads);
  const int64_t rows = layout.batch * layout.tokens, width = layout.Width();
  // the MLP: out = x1 + keep2 * fc2(GELU(fc1(LN2(x1))))
  Tensor grad_rows = ScaledBySample(grad_out, keep2, layout.batch, threads);  // [M, D], the branch's
  Tensor grad_fc2_w = paddle::experimental::matmul(activated, grad_rows, true, false);  // [Dh, D]
  Tensor grad_fc2_b = ColumnSums(grad_rows, threads);
  Tensor grad_hidden = GeluBackward(hidden, paddle::experimental::matmul(grad_rows, fc2_w, false, true), threads)[0];
  Tensor normed2 = Normalised(x1, ln2_w, ln2_b, mean2, variance2, epsilon, threads);  // [M, D], again
  Tensor grad_fc1_w = paddle::experimental::matmul(normed2, grad_hidden, true, false);  // [D, Dh]
  Tensor grad_fc1_b = ColumnSums(grad_hidden, threads);
  Tensor grad_normed2 = paddle::experimental::matmul(grad_hidden, fc1_w, false, true);  // [M, D]
  auto norm2_grads = LayerNormBackward(x1, ln2_w, mean2, variance2, grad_normed2, epsilon, threads);
  Tensor grad_x1 = Empty({rows, width}, x);  // the residual's gradient and the MLP branch's
  AddInto(grad_out.data<float>(), norm2_grads[0].data<float>(), grad_x1.data<float>(), x.numel(), threads);
  // the attention: x1 = x + keep1 * proj(softmax(q k^T) v), q scaled
  Tensor grad_branch = ScaledBySample(grad_x1, keep1, layout.batch, threads);  // [M, D]
  Tensor grad_proj_w = paddle::experimental::matmul(attended, grad_branch, true, false);  // [D, D]
  Tensor grad_proj_b = ColumnSums(grad_branch, threads);
  Tensor grad_attended = paddle::experimental::matmul(grad_branch, proj_w, false, true);  // [M, D]
  const std::vector<int64_t> head_shape = {layout.batch, heads, layout.tokens, layout.head_dim};
  Tensor grad_heads_out = Empty(head_shape, x);  // [B, H, N, d]
  ToHeads(grad_attended.data<float>(), {grad_heads_out.data<float>()}, 1.0f, layout, threads);
  Tensor grad_v = paddle::experimental::matmul(weights, grad_heads_out, true, false);
  Tensor grad_scores = SoftmaxBackward(weights, paddle::experimental::matmul(grad_heads_out, v, false, true), threads)[0];
  Tensor grad_q = paddle::experimental::matmul(grad_scores, k);  // of the scaled q: times scale below
  Tensor grad_k = paddle::experimental::matmul(grad_scores, q, true, false);
  Tensor grad_qkv = Empty({rows, 3 * width}, x);  // [M, 3 D]
  FromHeads({grad_q.data<float>(), grad_k.data<float>(), grad_v.data<float>()}, grad_qkv.data<float>(), scale,
            layout, threads);
  Tensor normed1 = Normalised(x, ln1_w, ln1_b, mean1, variance1, epsilon, threads);  // [M, D], again
  Tensor grad_qkv_w = paddle::experimental::matmul(normed1, grad_qkv, true, false);  // [D, 3 D]
  Tensor grad_qkv_b = ColumnSums(grad_qkv, threads);
  Tensor grad_normed1 = paddle::experimental::matmul(grad_qkv, qkv_w, false, true);  // [M, D]
  auto norm1_grads = LayerNormBackward(x, ln1_w, mean1, variance1, grad_normed1, epsilon, threads);
  Tensor grad_x = Empty(x.shape(), x);
  AddInto(grad_x1.data<float>(), norm1_grads[0].data<float>(), grad_x.data<float>(), x.numel(), threads);
  return {grad_x,     norm1_grads[1], norm1_grads[2], grad_qkv_w, grad_qkv_b, grad_proj_w, grad_proj_b,
          norm2_grads[1], norm2_grads[2], grad_fc1_w, grad_fc1_b, grad_fc2_w, grad_fc2_b};
}

PD_BUILD_OP(paddle_vit_encoder_layer)
    .Inputs({"X", "LN1W", "LN1B", "QKVW", "QKVB", "ProjW", "ProjB", "LN2W", "LN2B", "FC1W", "FC1B", "FC2W", "FC2B",
             "Keep1", "Keep2"})
    .Outputs({"Out", "Q", "K", "V", "Attended", "X1", "Hidden", "Mean1", "Variance1", "Mean2", "Variance2",
              "Weights", "Activated"})
    .Attrs({"heads: int", "scale: float", "epsilon: float", "threads: int"})
    .SetKernelFn(PD_KERNEL(EncoderLayerForward));

PD_BUILD_GRAD_OP(paddle_vit_encoder_layer)
    .Inputs({"X", "LN1W", "LN1B", "QKVW", "ProjW", "LN2W", "LN2B", "FC1W", "FC2W", "Q", "K", "V", "Attended", "X1",
             "Hidden", "Mean1", "Variance1", "Mean2", "Variance2", "Weights", "Activated", "Keep1", "Keep2",
             paddle::Grad("Out")})
    .Outputs({paddle::Grad("X"), paddle::Grad("LN1W"), paddle::Grad("LN1B"), paddle::Grad("QKVW"),
              paddle::Grad("QKVB"), paddle::Grad("ProjW"), paddle::Grad("ProjB"), paddle::Grad("LN2W"),
              paddle::Grad("LN2B"), paddle::Grad("FC1W"), paddle::Grad("FC1B"), paddle::Grad("FC2W"),
              paddle::Grad("FC2B")})
    .Attrs({"heads: int", "scale: float", "epsilon: float", "threads: int"})
    .SetKernelFn(PD_KERNEL(EncoderLayerBackward));

PD_BUILD_OP(paddle_vit_encoder_layer_inference)
    .Inputs({"X", "LN1W", "LN1B", "QKVW", "QKVB", "ProjW", "ProjB", "LN2W", "LN2B", "FC1W", "FC1B", "FC2W", "FC2B"})
    .Outputs({"Out"})
    .Attrs({"heads: int", "scale: float", "epsilon: float", "threads: int"})
    .SetKernelFn(PD_KERNEL(EncoderLayerInference));
