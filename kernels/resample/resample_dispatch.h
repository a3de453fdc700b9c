// voxaug: packing of resample targets into the kernel parameter block (shared by backends).
#pragma once

#include "voxaug/detail/resample.h"

namespace voxaug::detail {

template <class Launcher>
void resample_run(const ResampleParams& p, int64_t batch, bool use_double, cudaStream_t stream) {
  if (use_double) {
    Launcher::launch(ResampleForward<double>{p}, batch, stream);
  } else {
    Launcher::launch(ResampleForward<float>{p}, batch, stream);
  }
}

// The CPU forward per accumulation type (float, double), each explicitly instantiated in its own
// translation unit (kernels/resample/cpu/forward_*.cpp, resample_cpu_entry.h) so that a parallel
// build compiles the two sets of ISA clones at once; resample.cpp calls these.
template <class Acc>
void resample_forward_cpu(const ResampleParams& p, int64_t batch);

}  // namespace voxaug::detail
