// voxaug: the CPU pointwise chain for float16 input, every output dtype (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_FORWARD(voxaug::detail::half_t)
