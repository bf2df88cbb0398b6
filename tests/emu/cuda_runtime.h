/* tests/emu/cuda_runtime.h - the emulator stands in for the CUDA header (kvq_emu.h). */
#include "kvq_emu.h"
