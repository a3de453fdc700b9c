// voxaug: the CPU pointwise chain for uint8 input, every output dtype (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_FORWARD(uint8_t)
