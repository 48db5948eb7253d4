// The CPU features of this machine read with CPUID (and XGETBV for what the OS enables), named as
// cpuinfo and at::cpu::get_cpu_capabilities() name them, so the lite runtime's host checks need
// no libtorch. tests/cpp checks both readings agree on this machine. On 64-bit ARM Linux the
// auxiliary vector's HWCAP names Advanced SIMD ("asimd", what an aarch64 package's NEON kernels
// need) and SVE; elsewhere the set is empty and every package naming an ISA is refused.
#include "core/host/host.h"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#elif defined(__aarch64__) && defined(__linux__)
#include <asm/hwcap.h>
#include <sys/auxv.h>
#endif

#include <cstdint>

namespace tdaot::detail {

std::unordered_map<std::string, bool> cpu_features() {
  std::unordered_map<std::string, bool> features;
#if defined(__x86_64__) || defined(__i386__)
  unsigned a = 0, b = 0, c = 0, d = 0;
  const unsigned max_leaf = __get_cpuid_max(0, nullptr);
  const auto bit = [](unsigned reg, int n) { return ((reg >> n) & 1U) != 0; };
  __cpuid(1, a, b, c, d);
  const unsigned ecx1 = c, edx1 = d;
  // XCR0: the register state the OS saves; a feature it does not save cannot be used.
  uint64_t xcr0 = 0;
  if (bit(ecx1, 27)) {  // OSXSAVE
    unsigned lo = 0, hi = 0;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    xcr0 = (uint64_t{hi} << 32) | lo;
  }
  const bool os_avx = (xcr0 & 0x6) == 0x6;
  const bool os_avx512 = (xcr0 & 0xE6) == 0xE6;
  const bool os_amx = (xcr0 & 0x60000) == 0x60000;
  features["sse"] = bit(edx1, 25);
  features["sse2"] = bit(edx1, 26);
  features["clflush"] = bit(edx1, 19);
  features["sse3"] = bit(ecx1, 0);
  features["ssse3"] = bit(ecx1, 9);
  features["sse4_1"] = bit(ecx1, 19);
  features["sse4_2"] = bit(ecx1, 20);
  features["popcnt"] = bit(ecx1, 23);
  features["aes"] = bit(ecx1, 25);
  features["avx"] = bit(ecx1, 28) && os_avx;
  features["fma3"] = bit(ecx1, 12) && os_avx;
  features["f16c"] = bit(ecx1, 29) && os_avx;
  unsigned ebx7 = 0, ecx7 = 0, edx7 = 0, eax71 = 0, edx71 = 0;
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    ebx7 = b, ecx7 = c, edx7 = d;
    __cpuid_count(7, 1, a, b, c, d);
    eax71 = a, edx71 = d;
  }
  features["bmi"] = bit(ebx7, 3);
  features["bmi2"] = bit(ebx7, 8);
  features["sha"] = bit(ebx7, 29);
  features["clflushopt"] = bit(ebx7, 23);
  features["clwb"] = bit(ebx7, 24);
  features["avx2"] = bit(ebx7, 5) && os_avx;
  features["avx_vnni"] = bit(eax71, 4) && os_avx;
  const struct {
    const char* name;
    unsigned reg;
    int n;
  } avx512[] = {
      {"avx512_f", ebx7, 16},      {"avx512_dq", ebx7, 17},         {"avx512_ifma", ebx7, 21},
      {"avx512_cd", ebx7, 28},     {"avx512_bw", ebx7, 30},         {"avx512_vl", ebx7, 31},
      {"avx512_vbmi", ecx7, 1},    {"avx512_vbmi2", ecx7, 6},       {"avx512_vnni", ecx7, 11},
      {"avx512_bitalg", ecx7, 12}, {"avx512_vpopcntdq", ecx7, 14},  {"avx512_4vnniw", edx7, 2},
      {"avx512_4fmaps", edx7, 3},  {"avx512_vp2intersect", edx7, 8}, {"avx512_fp16", edx7, 23},
      {"avx512_bf16", eax71, 5},
  };
  for (const auto& f : avx512) features[f.name] = bit(f.reg, f.n) && os_avx512;
  features["amx_bf16"] = bit(edx7, 22) && os_amx;
  features["amx_tile"] = bit(edx7, 24) && os_amx;
  features["amx_int8"] = bit(edx7, 25) && os_amx;
  features["amx_fp16"] = bit(eax71, 21) && os_amx;
  features["avx_vnni_int8"] = bit(edx71, 4) && os_avx;
  features["avx_ne_convert"] = bit(edx71, 5) && os_avx;
  features["avx_vnni_int16"] = bit(edx71, 10) && os_avx;
  unsigned ecx81 = 0;
  if (__get_cpuid_max(0x80000000, nullptr) >= 0x80000001) {
    __cpuid(0x80000001, a, b, c, d);
    ecx81 = c;
  }
  features["lzcnt"] = bit(ecx81, 5);
  features["sse4a"] = bit(ecx81, 6);
  features["fma4"] = bit(ecx81, 16) && os_avx;
#elif defined(__aarch64__) && defined(__linux__)
  const unsigned long hwcap = getauxval(AT_HWCAP);
  features["asimd"] = (hwcap & HWCAP_ASIMD) != 0;
  features["sve"] = (hwcap & HWCAP_SVE) != 0;
#endif
  return features;
}

}  // namespace tdaot::detail
