// voxaug: the CPU resample gather with float32 coordinates and weights (see resample_cpu_entry.h).
#include "../resample_cpu_entry.h"

template void voxaug::detail::resample_forward_cpu<float>(const voxaug::detail::ResampleParams&,
                                                         int64_t);
