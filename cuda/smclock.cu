// The SM clock kernel alone (app/submit/gpu_runtime/smclock.py): for a GPU submitter whose own
// modules have no clock kernel. mini-gda's module carries the same kernel (cuda/gda/kernels.cu).
#include "smclock.cuh"

extern "C" __global__ void gda_clock(uint64_t ns, int64_t* out) { gicbench::spin_for_clock(ns, out); }
