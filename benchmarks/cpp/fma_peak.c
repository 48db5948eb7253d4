/* tdaot-bench-fma-peak: this core's fp32 FMA peak in GFLOP/s, the floor make bench sets the
 * policies' achieved GFLOP/s against (benchmarks/flops.py). Built with -march=native: 16
 * independent chains of fused multiply-adds on the widest vectors the host has (64-byte
 * vectors become two 32-byte ones without AVX-512), enough to cover the FMA latency of two
 * FMA ports. Prints {"gflops": best of the repeats, "isa": the vectors compiled for, "seconds": ...}. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

typedef float v16 __attribute__((vector_size(64)));
#define CHAINS 16

/* The thread's CPU time, not the wall clock: on a shared machine the loop's peak is what it
 * does while it runs, whoever else gets the core in between. */
static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

/* One timed run of `iters` x CHAINS vector FMAs; the result is added to *sink so none is
 * elided. The chains are separate variables (an array would live on the stack). */
static double run(long iters, float seed, float *sink) {
  v16 mul, add;
  for (int i = 0; i < 16; ++i) {
    mul[i] = 0.999999f;
    add[i] = seed * 1e-7f;
  }
#define INIT(c) v16 a##c = add + (float)(c);
#define STEP(c) a##c = a##c * mul + add;
#define SUM(c) total += a##c;
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
  EACH(INIT)
  double start = now();
  for (long n = 0; n < iters; ++n) {
    EACH(STEP) /* contracted to FMAs (-ffp-contract=fast) */
  }
  double seconds = now() - start;
  v16 total = {0};
  EACH(SUM)
  for (int i = 0; i < 16; ++i) *sink += total[i];
  return seconds;
}

int main(int argc, char **argv) {
  long iters = argc > 1 ? atol(argv[1]) : 20000000L;
  int repeats = argc > 2 ? atoi(argv[2]) : 5;
  float sink = 0;
  double best = 1e30;
  run(iters / 10, 1.0f, &sink); /* warm-up: clocks up, pages in */
  for (int r = 0; r < repeats; ++r) {
    double s = run(iters, 1.0f + r, &sink);
    if (s < best) best = s;
  }
  double flops = 2.0 * 16 * CHAINS * (double)iters;
#if defined(__AVX512F__)
  const char *isa = "avx512";
#elif defined(__AVX2__) && defined(__FMA__)
  const char *isa = "avx2+fma";
#else
  const char *isa = "other";
#endif
  printf("{\"gflops\": %.2f, \"isa\": \"%s\", \"seconds\": %.4f, \"sink\": %g}\n", flops / best / 1e9, isa,
         best, (double)sink);
  return 0;
}
