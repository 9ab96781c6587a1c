// AdamW's update of every parameter at once, float32 on a CPU, with the gradients' global-norm
// clipping folded in: one op for the whole model instead of Paddle's clip (a norm, a sum and a
// multiplication per parameter) and one adamw kernel per parameter, each started from Python,
// on one thread (about 30 ms a step of ViT-Ti/16's 152 parameters). The elements of all the
// parameters are shared out over threads as one range, threads started for the call: the
// update runs between the training step's passes, which run on threads of their own
// (batch_threads.py), so a team of the math library's left spinning after it took a core from
// them (ViT-Ti/16's step about 1.08x as long). For parameter i, with
// lr_i = lr * lr_ratio_i and its beta powers b1p, b2p (beta^t: Paddle's accumulators):
//   c    = max_norm / max(||g||, max_norm)        (||g|| over every gradient; c = 1 without clipping)
//   g    = c * grad
//   p    = p * (1 - lr_i * coeff)                 (decoupled weight decay, where the parameter decays)
//   m    = beta1 m + (1 - beta1) g,   v = beta2 v + (1 - beta2) g^2
//   p    = p - lr_i sqrt(1 - b2p) / (1 - b1p) * m / (sqrt(v) + epsilon sqrt(1 - b2p))
//   b1p *= beta1, b2p *= beta2
// as Paddle 3.3's AdamW and ClipGradByGlobalNorm compute them (the norm here summed in double).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "paddle/extension.h"
#include "vector_math.h"

namespace {

using paddle::Tensor;
using paddle_vit_kernels::InStartedThreads;

// work(i, first, last) over the elements [first, last) of tensor i, for the part [begin, end) of
// all the tensors' elements taken as one range (`starts`: each tensor's first element in it).
template <typename Work>
void OverSpan(const std::vector<int64_t>& starts, int64_t begin, int64_t end, Work work) {
  for (size_t i = 0; i + 1 < starts.size(); ++i) {
    const int64_t first = std::max(begin, starts[i]), last = std::min(end, starts[i + 1]);
    if (first < last) work(i, first - starts[i], last - starts[i]);
  }
}

struct Step {
  float lr, beta1, beta2, epsilon, coeff;
};

void UpdateElements(float* p, const float* g, float* m, float* v, int64_t first, int64_t last, float clip,
                    float decay_factor, float step_size, float epsilon_hat, const Step& step) {
#pragma omp simd
  for (int64_t j = first; j < last; ++j) {
    const float grad = g[j] * clip;
    const float decayed = p[j] * decay_factor;
    const float m_new = step.beta1 * m[j] + (1.0f - step.beta1) * grad;
    const float v_new = step.beta2 * v[j] + (1.0f - step.beta2) * grad * grad;
    m[j] = m_new;
    v[j] = v_new;
    p[j] = decayed - step_size * (m_new / (std::sqrt(v_new) + epsilon_hat));
  }
}

}  // namespace

// In place: the parameters, moments and beta powers (the op's inplace map below).
void FusedAdamW(std::vector<Tensor>& params, const std::vector<Tensor>& grads, std::vector<Tensor>& moment1,
                std::vector<Tensor>& moment2, std::vector<Tensor>& beta1_pows, std::vector<Tensor>& beta2_pows,
                               const std::vector<float>& lr_ratios, const std::vector<int>& decays,
                               float learning_rate, float beta1, float beta2, float epsilon, float coeff,
                               float max_norm, int threads) {
  const size_t count = params.size();
  PD_CHECK(grads.size() == count && moment1.size() == count && moment2.size() == count &&
               beta1_pows.size() == count && beta2_pows.size() == count && lr_ratios.size() == count &&
               decays.size() == count,
           "paddle_vit_adamw: one gradient, moment pair, beta power pair, ratio and decay flag per parameter");
  std::vector<int64_t> starts(count + 1, 0);
  for (size_t i = 0; i < count; ++i) starts[i + 1] = starts[i] + params[i].numel();
  const int64_t total = starts[count];
  const int blocks = static_cast<int>(std::max<int64_t>(1, std::min<int64_t>(threads, total)));

  float clip = 1.0f;
  if (max_norm > 0.0f) {
    std::vector<double> partial(blocks, 0.0);
    InStartedThreads(blocks, blocks, [&](int64_t first_block, int64_t last_block) {
      for (int64_t block = first_block; block < last_block; ++block) {
        double sum = 0.0;
        OverSpan(starts, total * block / blocks, total * (block + 1) / blocks, [&](size_t i, int64_t first, int64_t last) {
          const float* g = grads[i].data<float>();
          float part = 0.0f;
#pragma omp simd reduction(+ : part)
          for (int64_t j = first; j < last; ++j) part += g[j] * g[j];
          sum += part;
        });
        partial[block] = sum;
      }
    });
    double squares = 0.0;
    for (double part : partial) squares += part;
    const float norm = static_cast<float>(std::sqrt(squares));
    clip = max_norm / std::max(norm, max_norm);
  }

  const Step step{learning_rate, beta1, beta2, epsilon, coeff};
  std::vector<float> decay_factors(count), step_sizes(count), epsilon_hats(count);
  for (size_t i = 0; i < count; ++i) {
    const float lr = learning_rate * lr_ratios[i];
    const float beta1_pow = beta1_pows[i].data<float>()[0], beta2_pow = beta2_pows[i].data<float>()[0];
    decay_factors[i] = decays[i] ? 1.0f - lr * coeff : 1.0f;
    step_sizes[i] = lr * std::sqrt(1.0f - beta2_pow) / (1.0f - beta1_pow);
    epsilon_hats[i] = epsilon * std::sqrt(1.0f - beta2_pow);
  }
  InStartedThreads(blocks, blocks, [&](int64_t first_block, int64_t last_block) {
    for (int64_t block = first_block; block < last_block; ++block) {
      OverSpan(starts, total * block / blocks, total * (block + 1) / blocks, [&](size_t i, int64_t first, int64_t last) {
        UpdateElements(params[i].data<float>(), grads[i].data<float>(), moment1[i].data<float>(),
                       moment2[i].data<float>(), first, last, clip, decay_factors[i], step_sizes[i], epsilon_hats[i], step);
      });
    }
  });
  for (size_t i = 0; i < count; ++i) {
    beta1_pows[i].data<float>()[0] *= beta1;
    beta2_pows[i].data<float>()[0] *= beta2;
  }
}

PD_BUILD_OP(paddle_vit_adamw)
    .Inputs({paddle::Vec("Params"), paddle::Vec("Grads"), paddle::Vec("Moment1"), paddle::Vec("Moment2"),
             paddle::Vec("Beta1Pows"), paddle::Vec("Beta2Pows")})
    .Outputs({paddle::Vec("ParamsOut"), paddle::Vec("Moment1Out"), paddle::Vec("Moment2Out"),
              paddle::Vec("Beta1PowsOut"), paddle::Vec("Beta2PowsOut")})
    .SetInplaceMap({{paddle::Vec("Params"), paddle::Vec("ParamsOut")},
                    {paddle::Vec("Moment1"), paddle::Vec("Moment1Out")},
                    {paddle::Vec("Moment2"), paddle::Vec("Moment2Out")},
                    {paddle::Vec("Beta1Pows"), paddle::Vec("Beta1PowsOut")},
                    {paddle::Vec("Beta2Pows"), paddle::Vec("Beta2PowsOut")}})
    .Attrs({"lr_ratios: std::vector<float>", "decays: std::vector<int>", "learning_rate: float", "beta1: float",
            "beta2: float", "epsilon: float", "coeff: float", "max_norm: float", "threads: int"})
    .SetKernelFn(PD_KERNEL(FusedAdamW));
