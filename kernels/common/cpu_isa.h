// voxaug: the host's instruction-set clones. A hot loop is written once (an inline body) and
// instantiated in functions compiled for AVX-512 and AVX2 (each with FMA) as well as the
// baseline; cpu_isa() picks one per process. The clones run the same operations in the same
// order (no FMA contraction: -ffp-contract=off; an explicit detail::ffma is one rounding
// everywhere, the baseline's through libm), so their results are bit-identical to the baseline's.
#pragma once

namespace voxaug::detail {

// no-tree-loop-distribute-patterns: GCC would otherwise turn short tile / row copy and zeroing
// loops into memcpy / memset calls (or rep movs), which made every chain about 2x slower on
// Zen 4 (a plain shift: 5.0 -> 2.5 ms per 1x160x224x224 float32 volume on one core) and the
// filter's rows likewise; the inline vector copies round nothing, so the results are unchanged.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define VOXAUG_TARGET_BASELINE __attribute__((optimize("no-tree-loop-distribute-patterns")))
#define VOXAUG_TARGET_AVX2 \
  __attribute__((target("avx2,fma"), optimize("no-tree-loop-distribute-patterns")))
#define VOXAUG_TARGET_AVX512                                       \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), \
                 optimize("no-tree-loop-distribute-patterns")))
#define VOXAUG_CPU_CLONES 1
#else
#define VOXAUG_TARGET_BASELINE
#define VOXAUG_TARGET_AVX2
#define VOXAUG_TARGET_AVX512
#define VOXAUG_CPU_CLONES 0
#endif

enum class CpuIsa { Baseline, Avx2, Avx512 };

// Chosen once per process: AVX-512 (F, BW, DQ, VL) + FMA, else AVX2 + FMA, else the baseline.
inline CpuIsa cpu_isa() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const CpuIsa isa =
      __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
              __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl") &&
              __builtin_cpu_supports("fma")
          ? CpuIsa::Avx512
      : __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? CpuIsa::Avx2
                                                                        : CpuIsa::Baseline;
  return isa;
#else
  return CpuIsa::Baseline;
#endif
}

}  // namespace voxaug::detail
