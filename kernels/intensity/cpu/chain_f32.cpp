// voxaug: the CPU pointwise chain for float32 input, every output dtype (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_FORWARD(float)
