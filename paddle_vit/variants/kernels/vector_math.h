// What the compiled CPU kernels share: a vectorisable exp and the threads a call's rows or
// elements are shared out over. Built with PADDLE_VIT_OPENMP (compiled.py: where Paddle's wheel
// runs its matrix products on Intel's OpenMP runtime), a call is one OpenMP region on that same
// runtime, so that the products and the kernels between them take turns on one team of threads,
// which stays awake between them (200 ms, the runtime's blocktime). Two teams took the cores
// from each other: threads of their own (GCC's OpenMP runtime, or threads started per call while
// the products' team spun) slowed the products that followed, and putting the products' team to
// sleep around the encoder layer's ops (2026-12-05) made each product wake it again: on
// ViT-S/16 in evaluation the layers' products took 214 ms a pass against 180 alone
// (docs/benchmarks.md, "Eager evaluation"). Elsewhere threads are started per call and joined.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>
#ifdef PADDLE_VIT_OPENMP
#include <omp.h>
#endif

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

// work(first, last) over [0, count) in `threads` blocks on threads started for the call and
// joined before it returns, the first block on the calling thread.
template <typename Rows>
void InStartedThreads(int64_t count, int threads, Rows work) {
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, count));
  std::vector<std::thread> workers;
  for (int64_t b = 1; b < blocks; ++b) workers.emplace_back(work, count * b / blocks, count * (b + 1) / blocks);
  work(0, count / blocks);
  for (auto& worker : workers) worker.join();
}

// The same blocks on the products' team of threads where the build has it (the first block on
// the calling thread there too), else as InStartedThreads.
template <typename Rows>
void InThreads(int64_t count, int threads, Rows work) {
#ifdef PADDLE_VIT_OPENMP
  const int64_t blocks = std::max<int64_t>(1, std::min<int64_t>(threads, count));
  if (blocks == 1) {
    work(0, count);
    return;
  }
#pragma omp parallel num_threads(blocks)
  {
    const int64_t block = omp_get_thread_num(), team = omp_get_num_threads();  // the team may be smaller
    work(count * block / team, count * (block + 1) / team);
  }
#else
  InStartedThreads(count, threads, work);
#endif
}

}  // namespace paddle_vit_kernels
