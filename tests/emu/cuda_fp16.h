/* tests/emu/cuda_fp16.h - the emulator stands in for the CUDA header (kvq_emu.h). */
#include "kvq_emu.h"
