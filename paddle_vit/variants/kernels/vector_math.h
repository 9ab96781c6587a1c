// What the compiled CPU kernels share: a vectorisable exp and the threads a call's rows or
// elements are shared out over (started per call and joined before it returns: an OpenMP team's
// workers spin after a region and take the cores from the matrix products that run next,
// docs/benchmarks.md, "The training step against timm").
#pragma once

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
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

// Intel's OpenMP runtime, which runs MKL's products in Paddle's wheel, lets a team's threads spin
// 200 ms after each product before they sleep; the kernels' own threads that run between the
// products then shared the cores with them (inside the evaluation op of ViT-S/16 the GELU took
// 24-28 ms a pass with the spin and 15 without). While an op that calls products and kernels in
// turn runs, the threads sleep at once; the runtime's value comes back when it returns, so that
// Paddle's own graphs of many short products keep the spin that pays for them (a small model's
// training took 1.5x as long with the spin off for the whole process). Nothing where the runtime
// is not loaded or the user set KMP_BLOCKTIME.
class IdleThreadsAsleep {
 public:
  IdleThreadsAsleep() {
    const Runtime& runtime = Found();
    if (runtime.set == nullptr) return;
    before_ = runtime.get();
    runtime.set(0);
  }
  ~IdleThreadsAsleep() {
    if (before_ >= 0) Found().set(before_);
  }
  IdleThreadsAsleep(const IdleThreadsAsleep&) = delete;
  IdleThreadsAsleep& operator=(const IdleThreadsAsleep&) = delete;

 private:
  struct Runtime {
    void (*set)(int) = nullptr;  // kmp_set_blocktime: for the teams the calling thread starts
    int (*get)() = nullptr;
  };
  static const Runtime& Found() {
    static const Runtime runtime = [] {
      Runtime found;
      if (std::getenv("KMP_BLOCKTIME") != nullptr) return found;
      void* library = dlopen("libiomp5.so", RTLD_LAZY | RTLD_NOLOAD);  // the copy Paddle loaded, never another
      if (library == nullptr) return found;
      found.set = reinterpret_cast<void (*)(int)>(dlsym(library, "kmp_set_blocktime"));
      found.get = reinterpret_cast<int (*)()>(dlsym(library, "kmp_get_blocktime"));
      if (found.set == nullptr || found.get == nullptr) found = Runtime();
      return found;
    }();
    return runtime;
  }
  int before_ = -1;
};

}  // namespace paddle_vit_kernels
