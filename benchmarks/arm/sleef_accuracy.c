/* The accuracy of the SLEEF NEON functions an aarch64 package's kernels call (Debian's arm64
 * libsleef.so.3, the one the aarch64 lite runtime links), against libm in double precision, in
 * ulps of the float result, and of libm's own float functions (the path torch's NEON headers take
 * without SLEEF: map(std::tanh) per lane). Cross-built and run under qemu-user by
 * benchmarks/arm_footprint.py; qemu runs the same instructions, so the errors are the board's.
 *
 *   aarch64-linux-gnu-gcc -O2 sleef_accuracy.c -lsleef -lm -o sleef_accuracy
 */
#include <arm_neon.h>
#include <math.h>
#include <sleef.h>
#include <stdio.h>
#include <string.h>

static double ulp_error(float got, double want) {
  if (isnan(got) && isnan(want)) return 0.0;
  float w = (float)want;
  float up = nextafterf(fabsf(w), INFINITY);
  double ulp = (double)up - fabs((double)w);
  if (ulp == 0.0 || isinf(ulp)) ulp = 1e-45;
  return fabs((double)got - want) / ulp;
}

typedef float32x4_t (*vec_fn)(float32x4_t);
typedef float (*scalar_fn)(float);
typedef double (*ref_fn)(double);

static void measure(const char* name, vec_fn sleef, scalar_fn libm_f, ref_fn ref, float lo, float hi) {
  const int n = 1 << 20;
  double worst_sleef = 0.0, worst_libm = 0.0;
  for (int i = 0; i < n; i += 4) {
    float x[4], y[4];
    for (int j = 0; j < 4; ++j) x[j] = lo + (hi - lo) * (float)(i + j) / (float)n;
    vst1q_f32(y, sleef(vld1q_f32(x)));
    for (int j = 0; j < 4; ++j) {
      double want = ref((double)x[j]);
      double e = ulp_error(y[j], want);
      if (e > worst_sleef) worst_sleef = e;
      e = ulp_error(libm_f(x[j]), want);
      if (e > worst_libm) worst_libm = e;
    }
  }
  printf("{\"function\": \"%s\", \"range\": [%g, %g], \"points\": %d, \"sleef_max_ulp\": %.3f, "
         "\"libm_float_max_ulp\": %.3f}\n", name, lo, hi, n, worst_sleef, worst_libm);
}

int main(void) {
  measure("tanhf (Sleef_tanhf4_u10)", Sleef_tanhf4_u10, tanhf, tanh, -10.0f, 10.0f);
  measure("expf (Sleef_expf4_u10)", Sleef_expf4_u10, expf, exp, -80.0f, 80.0f);
  measure("logf (Sleef_logf4_u10)", Sleef_logf4_u10, logf, log, 1e-6f, 1e6f);
  measure("sinf (Sleef_sinf4_u10)", Sleef_sinf4_u10, sinf, sin, -100.0f, 100.0f);
  measure("expm1f (Sleef_expm1f4_u10)", Sleef_expm1f4_u10, expm1f, expm1, -20.0f, 20.0f);
  return 0;
}
