// sm_90a-only instruction without WGMMA: setmaxnreg (needs the "a" target; ptxas rejects it on sm_90).
extern "C" __global__ void __launch_bounds__(256, 1) dt_maxnreg(int* out) {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
  out[threadIdx.x] = static_cast<int>(threadIdx.x);
}
