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

}  // namespace voxaug::detail
