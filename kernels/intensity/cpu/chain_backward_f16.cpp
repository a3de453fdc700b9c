// voxaug: the CPU pointwise chain's backward for float16 and bfloat16 (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_BACKWARD(voxaug::detail::half_t)
VOXAUG_CHAIN_CPU_BACKWARD(voxaug::detail::bfloat16_t)
