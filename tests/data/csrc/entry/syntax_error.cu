// Deliberately broken: the compile must fail with CompileError carrying the log.
extern "C" __global__ void dt_syntax_error(int* out) {
  int value = ;
  out[0] = value;
}
