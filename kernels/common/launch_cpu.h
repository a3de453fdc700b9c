// voxaug: the host launcher. Runs an item functor over a batch with OpenMP.
//
// A functor F provides: `using State`, `int64_t items() const` (items per sample),
// `void begin_sample(int64_t n, State&) const` (per-sample set-up, e.g. resolving random
// parameters) and `void operator()(State&, int64_t n, int64_t item) const`.
#pragma once

#include <algorithm>
#include <cstdint>

#include "voxaug/config.h"  // cudaStream_t

namespace voxaug::detail {

// Runs items [begin, end) of sample n. Functors with a host-specific structure (e.g. the
// tiled, vectorised pointwise chain) provide their own cpu_items overload, found by ADL.
template <class F>
void cpu_items(const F& f, typename F::State& st, int64_t n, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) f(st, n, i);
}

struct CpuLauncher {
  template <class F>
  static void launch(const F& f, int64_t num_samples, cudaStream_t /*unused*/) {
    const int64_t items = f.items();
    if (num_samples <= 0 || items <= 0) return;
    constexpr int64_t kChunk = 2048;  // items per task: amortises begin_sample
    const int64_t chunks = (items + kChunk - 1) / kChunk;
    const int64_t total = num_samples * chunks;
#pragma omp parallel for schedule(static)
    for (int64_t t = 0; t < total; ++t) {
      const int64_t n = t / chunks;
      const int64_t begin = (t % chunks) * kChunk;
      const int64_t end = std::min(items, begin + kChunk);
      typename F::State st;
      f.begin_sample(n, st);
      cpu_items(f, st, n, begin, end);
    }
  }
};

}  // namespace voxaug::detail
