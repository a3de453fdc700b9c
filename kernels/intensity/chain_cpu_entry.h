// voxaug: the definitions of chain_forward_cpu / chain_backward_cpu (chain_dispatch.h) for the
// translation units that instantiate them, one input dtype each (kernels/intensity/cpu/):
// splitting the ~70 ISA clones of the chain over several objects lets a parallel build compile
// them at once (in one object they took about 4 minutes, the build's critical path).
#pragma once

#include "../common/launch_cpu.h"
#include "chain_cpu.h"
#include "chain_dispatch.h"

namespace voxaug::detail {

template <class TIn>
void chain_forward_cpu(const VolumeView& in, const VolumeView& out, const ChainParams& p) {
  chain_forward_in<CpuLauncher, TIn>(in, out, p, cudaStream_t{});
}

template <class T>
void chain_backward_cpu(const VolumeView& grad_out, const VolumeView& in,
                        const VolumeView& grad_in, const ChainParams& p) {
  chain_backward_in<CpuLauncher, T>(grad_out, in, grad_in, p, cudaStream_t{});
}

}  // namespace voxaug::detail

#define VOXAUG_CHAIN_CPU_FORWARD(T)                                                             \
  template void voxaug::detail::chain_forward_cpu<T>(const voxaug::VolumeView&,                \
                                                     const voxaug::VolumeView&,                \
                                                     const voxaug::detail::ChainParams&);
#define VOXAUG_CHAIN_CPU_BACKWARD(T)                                                            \
  template void voxaug::detail::chain_backward_cpu<T>(                                          \
      const voxaug::VolumeView&, const voxaug::VolumeView&, const voxaug::VolumeView&,         \
      const voxaug::detail::ChainParams&);
