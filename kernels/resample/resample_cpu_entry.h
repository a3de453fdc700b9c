// voxaug: the definition of resample_forward_cpu (resample_dispatch.h) for the translation units
// that instantiate it, one accumulation type each (kernels/resample/cpu/).
#pragma once

#include "../common/launch_cpu.h"
#include "resample_cpu.h"
#include "resample_dispatch.h"

namespace voxaug::detail {

template <class Acc>
void resample_forward_cpu(const ResampleParams& p, int64_t batch) {
  CpuLauncher::launch(ResampleForward<Acc>{p}, batch, cudaStream_t{});
}

}  // namespace voxaug::detail
