/* tdaot-bench-fma-peak: this core's fp32 FMA peak in GFLOP/s, the floor make bench sets the
 * policies' achieved GFLOP/s against (benchmarks/flops.py). Built with -march=native:
 * independent chains of fused multiply-adds on the widest vectors the host has, enough to cover
 * the FMA latency of two FMA ports and few enough to stay in registers: 16 chains of 64 bytes on
 * AVX-512 (32 registers), 12 of 32 bytes on AVX2 (16 registers; 16 chains of 64-byte vectors
 * there were 32 register pairs, spilled to the stack, and measured a tenth of the peak).
 * Prints {"gflops": best of the repeats, "isa": the vectors compiled for, "seconds": ...}. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#if defined(__AVX512F__)
#define LANES 16
#define CHAINS 16
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11) X(12) X(13) X(14) X(15)
#else
#define LANES 8
#define CHAINS 12
#define EACH(X) X(0) X(1) X(2) X(3) X(4) X(5) X(6) X(7) X(8) X(9) X(10) X(11)
#endif
typedef float vec __attribute__((vector_size(LANES * 4)));

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
  vec mul, add;
  for (int i = 0; i < LANES; ++i) {
    mul[i] = 0.999999f;
    add[i] = seed * 1e-7f;
  }
#define INIT(c) vec a##c = add + (float)(c);
#define STEP(c) a##c = a##c * mul + add;
#define SUM(c) total += a##c;
  EACH(INIT)
  double start = now();
  for (long n = 0; n < iters; ++n) {
    EACH(STEP) /* contracted to FMAs (-ffp-contract=fast) */
  }
  double seconds = now() - start;
  vec total = {0};
  EACH(SUM)
  for (int i = 0; i < LANES; ++i) *sink += total[i];
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
  double flops = 2.0 * LANES * CHAINS * (double)iters;
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
