// voxaug: the CPU pointwise chain's backward for float32 and float64 (see chain_cpu_entry.h).
#include "../chain_cpu_entry.h"

VOXAUG_CHAIN_CPU_BACKWARD(float)
VOXAUG_CHAIN_CPU_BACKWARD(double)
