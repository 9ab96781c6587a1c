// What the compiled CPU kernels share: a vectorisable exp and the threads a call's rows or
// elements are shared out over (started per call and joined before it returns: an OpenMP team's
// workers spin after a region and take the cores from the matrix products that run next,
// docs/benchmarks.md, "The training step against timm").
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

namespace paddle_vit_kernels {

// exp(x) for x <= 0 by Cephes' single-precision polynomial (about 1 ulp), written out so that the
// compiler vectorises it without a vector math library or -ffast-math; below -87 it is exp(-87),
// about 1.6e-38, where the true value is nearer 0: nothing a sum with 1 in it can tell apart.
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

// work(first, last) over [0, count) in `threads` blocks, the first on the calling thread.
template <typename Rows>
void InThreads(int64_t count, int threads, Rows work) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, count));
  std::vector<std::thread> workers;
  for (int64_t b = 1; b < blocks; ++b) workers.emplace_back(work, count * b / blocks, count * (b + 1) / blocks);
  work(0, count / blocks);
  for (auto& worker : workers) worker.join();
}

}  // namespace paddle_vit_kernels
