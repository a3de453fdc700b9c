// voxaug: packing of resample targets into the kernel parameter block (shared by backends).
#pragma once

#include "voxaug/detail/resample.h"

namespace voxaug::detail {

// Calls fn(ResampleForward<Acc, F>{p}) with the leanest instantiated variant F that covers the
// features `p` needs (resample_features): plain maps, plain maps with post steps, displacement
// fields, or every feature (B-splines, and any other combination).
template <class Acc, class Fn>
void with_resample_forward(const ResampleParams& p, Fn&& fn) {
  switch (resample_features(p)) {
    case 0u: fn(ResampleForward<Acc, 0u>{p}); return;
    case kResamplePost: fn(ResampleForward<Acc, kResamplePost>{p}); return;
    case kResampleField: fn(ResampleForward<Acc, kResampleField>{p}); return;
    default: fn(ResampleForward<Acc, kResampleAllFeatures>{p}); return;
  }
}

template <class Launcher>
void resample_run(const ResampleParams& p, int64_t batch, bool use_double, cudaStream_t stream) {
  const auto launch = [&](const auto& f) { Launcher::launch(f, batch, stream); };
  if (use_double) {
    with_resample_forward<double>(p, launch);
  } else {
    with_resample_forward<float>(p, launch);
  }
}

// The CPU forward per accumulation type (float, double), each explicitly instantiated in its own
// translation unit (kernels/resample/cpu/forward_*.cpp, resample_cpu_entry.h) so that a parallel
// build compiles the two sets of ISA clones at once; resample.cpp calls these.
template <class Acc>
void resample_forward_cpu(const ResampleParams& p, int64_t batch);

}  // namespace voxaug::detail
