// voxaug: the CPU pointwise chain for int16 input, every output dtype (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_FORWARD(int16_t)
