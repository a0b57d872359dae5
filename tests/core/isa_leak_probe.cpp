// A deliberate leak for scripts/check-isa.py to catch (test isa_check_catches_leak): compiled for
// x86-64-v3 (AVX2, FMA) outside any capability's namespace, as a baseline function that picked up
// another set's flags would be. Never run: only disassembled.
#include <cstdio>

__attribute__((noinline)) void leaky_saxpy(float* y, const float* x, float a, int n) {
  for (int i = 0; i < n; ++i) y[i] += a * x[i];
}

int main(int argc, char**) {
  float x[256], y[256];
  for (int i = 0; i < 256; ++i) x[i] = y[i] = float(i);
  leaky_saxpy(y, x, float(argc), 256);
  std::printf("%g\n", double(y[255]));
  return 0;
}
