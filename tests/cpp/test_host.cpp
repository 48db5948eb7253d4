// Host checks, against described hosts (so every branch runs on any machine) and this one.
#include <gtest/gtest.h>
#include <torch/version.h>

#include <functional>
#include <vector>

#include "core/host/host.h"
#include "runtime/torch_host.h"
#include "tdaot/errors.h"
#include "tdaot/manifest.h"
#include "tdaot/torch/policy.h"
#include "test_support.h"

namespace tdaot::detail {
namespace {

using test::catch_error;
using test::Contains;

Manifest cpu_manifest(const std::string& cpu_isa = "avx512",
                      const std::string& cpu_target = "native") {
  Manifest m;
  m.device = "cpu";
  m.torch_version = "2.13.0+cpu";
  m.cpu_isa = cpu_isa;
  m.cpu_target = cpu_target;
  return m;
}

// An AVX2 machine with torch 2.13 and no CUDA.
HostInfo avx2_host() {
  HostInfo host;
  host.torch_major = 2;
  host.torch_minor = 13;
  for (const char* f :
       {"sse4_2", "popcnt", "avx", "avx2", "fma3", "bmi", "bmi2", "f16c", "lzcnt"}) {
    host.cpu_features[f] = true;
  }
  host.cpu_features["avx512_f"] = false;
  return host;
}

HostInfo avx512_host() {
  HostInfo host = avx2_host();
  for (const char* f : {"avx512_f", "avx512_bw", "avx512_dq", "avx512_vl", "avx512_cd",
                        "avx512_vnni", "avx512_bf16"}) {
    host.cpu_features[f] = true;
  }
  return host;
}

// check_host must throw HostMismatchError naming the path and containing `message`.
void expect_mismatch(const Manifest& m, const HostInfo& host, const std::string& message) {
  const auto error = catch_error<HostMismatchError>([&] { check_host(m, "p.pt2", host); });
  ASSERT_TRUE(error);
  EXPECT_TRUE(Contains(error->what(), "package 'p.pt2' "));
  EXPECT_TRUE(Contains(error->what(), message));
  EXPECT_EQ(error->path(), "p.pt2");
}

TEST(HostCheck, MatchingHostPasses) {
  EXPECT_NO_THROW(check_host(cpu_manifest("avx512"), "p.pt2", avx512_host()));
  EXPECT_NO_THROW(check_host(cpu_manifest("AVX512 AVX512_VNNI"), "p.pt2", avx512_host()));
  EXPECT_NO_THROW(check_host(cpu_manifest("avx2", "x86-64-v3"), "p.pt2", avx2_host()));
  EXPECT_NO_THROW(check_host(cpu_manifest("avx512", "x86-64-v4"), "p.pt2", avx512_host()));
}

TEST(HostCheck, NoIsaNeedsNothing) {
  HostInfo bare = avx2_host();
  bare.cpu_features.clear();
  for (const char* isa : {"", "none", "default", "scalar"}) {
    EXPECT_NO_THROW(check_host(cpu_manifest(isa, "native"), "p.pt2", bare)) << isa;
  }
}

TEST(HostCheck, Avx512PackageOnAvx2Host) {
  expect_mismatch(cpu_manifest("avx512"), avx2_host(),
                  "was built for cpu_isa 'avx512', which needs the CPU feature 'avx512_f' this "
                  "CPU lacks");
}

TEST(HostCheck, Avx512NeedsBwToo) {
  HostInfo host = avx512_host();
  host.cpu_features["avx512_bw"] = false;
  expect_mismatch(cpu_manifest("avx512"), host, "'avx512_bw'");
}

TEST(HostCheck, IsaListIsCaseInsensitiveAndChecksEveryToken) {
  HostInfo host = avx512_host();
  host.cpu_features.erase("avx512_vnni");
  expect_mismatch(cpu_manifest("AVX512 AVX512_VNNI"), host,
                  "cpu_isa 'AVX512 AVX512_VNNI', but 'avx512_vnni' is not a CPU feature");
  expect_mismatch(cpu_manifest("avx512+avx512_vnni"), host, "'avx512_vnni'");
}

// The architecture is checked first: an aarch64 package names it and this host's, whatever else.
TEST(HostCheck, AnotherArchitecturesPackageIsRefusedByName) {
  Manifest arm = cpu_manifest("asimd", "aarch64");
  arm.architecture = "aarch64";
  HostInfo x86 = avx512_host();
  x86.architecture = "x86_64";
  expect_mismatch(arm, x86, "was built for aarch64, but this host is x86_64");
  Manifest intel = cpu_manifest("avx2", "x86-64-v3");
  intel.architecture = "x86_64";
  HostInfo board;
  board.architecture = "aarch64";
  board.cpu_features["asimd"] = true;
  expect_mismatch(intel, board, "was built for x86_64, but this host is aarch64; build it with "
                                "cpu_target='aarch64'");
  EXPECT_NO_THROW(check_host(arm, "p.pt2", board));
  board.cpu_features["asimd"] = false;
  expect_mismatch(arm, board, "cpu_isa 'asimd', which needs the CPU feature 'asimd'");
  // A package from before the architecture was recorded is checked by its ISA only.
  EXPECT_NO_THROW(check_host(cpu_manifest("avx2"), "p.pt2", x86));
}

TEST(HostCheck, ThisHostsArchitectureIsThisBuilds) {
  EXPECT_EQ(HostInfo{}.architecture, kThisArchitecture);
#if defined(__x86_64__)
  EXPECT_STREQ(kThisArchitecture, "x86_64");
#endif
}

TEST(HostCheck, Avx2NeedsFma) {
  HostInfo host = avx2_host();
  host.cpu_features["fma3"] = false;
  expect_mismatch(cpu_manifest("avx2"), host, "cpu_isa 'avx2', which needs the CPU feature 'fma3'");
}

TEST(HostCheck, OtherArchitectureIsa) {
  expect_mismatch(cpu_manifest("neon"), avx2_host(),
                  "'neon' is not a CPU feature this host has (or this runtime knows)");
}

TEST(HostCheck, CpuTargetLevel) {
  expect_mismatch(cpu_manifest("avx2", "x86-64-v4"), avx2_host(),
                  "was built for cpu_target 'x86-64-v4', which needs the CPU feature 'avx512_f'");
  // Targets that are not x86-64 levels are left to the cpu_isa check.
  EXPECT_NO_THROW(check_host(cpu_manifest("avx2", "skylake"), "p.pt2", avx2_host()));
}

TEST(HostCheck, TorchMinorMismatch) {
  Manifest m = cpu_manifest();
  m.torch_version = "2.12.1+cpu";
  expect_mismatch(m, avx512_host(),
                  "was built with torch 2.12.1+cpu but this runtime uses torch 2.13; rebuild it "
                  "with torch 2.13");
}

TEST(HostCheck, TorchMajorMismatch) {
  Manifest m = cpu_manifest();
  m.torch_version = "3.13.0";
  expect_mismatch(m, avx512_host(), "was built with torch 3.13.0");
}

TEST(HostCheck, TorchPatchAndLocalVersionDoNotMatter) {
  Manifest m = cpu_manifest();
  for (const char* version : {"2.13.0", "2.13.1+cu128", "2.13.0a0+git1234", "2.13"}) {
    m.torch_version = version;
    EXPECT_NO_THROW(check_host(m, "p.pt2", avx512_host())) << version;
  }
}

TEST(HostCheck, UnparseableTorchVersion) {
  Manifest m = cpu_manifest();
  m.torch_version = "nightly";
  expect_mismatch(m, avx512_host(), "names torch version 'nightly', which is not MAJOR.MINOR");
}

TEST(HostCheck, CudaPackageWithoutCuda) {
  Manifest m = cpu_manifest();
  m.device = "cuda";
  expect_mismatch(m, avx512_host(), "was built for device 'cuda', but CUDA is not available");
  HostInfo with_cuda = avx512_host();
  with_cuda.cuda_available = true;
  EXPECT_NO_THROW(check_host(m, "p.pt2", with_cuda));
}

TEST(HostCheck, UnsupportedDevice) {
  Manifest m = cpu_manifest();
  m.device = "mps";
  expect_mismatch(m, avx512_host(),
                  "was built for device 'mps', which this runtime does not support");
}

TEST(HostCheck, CurrentHost) {
  const HostInfo& host = current_host();
  EXPECT_EQ(host.torch_major, TORCH_VERSION_MAJOR);
  EXPECT_EQ(host.torch_minor, TORCH_VERSION_MINOR);
  EXPECT_FALSE(host.cpu_features.empty());
  EXPECT_EQ(&host, &current_host());
}

TEST(HostCheck, CpuidFeaturesAgreeWithATen) {
  // The lite runtime reads the CPU with CPUID; ATen with cpuinfo. Every feature both name must
  // agree on this machine, and the ones the ISA checks use must be among them.
  const auto ours = cpu_features();
  const auto& aten = current_host().cpu_features;
  for (const char* needed : {"avx2", "fma3", "avx512_f", "avx512_bw", "avx512_dq", "avx512_vl",
                             "avx512_cd", "sse4_2", "popcnt", "bmi", "bmi2", "f16c", "lzcnt",
                             "amx_tile"}) {
    EXPECT_EQ(ours.count(needed), 1u) << needed;
  }
  size_t compared = 0;
  for (const auto& [name, value] : ours) {
    auto it = aten.find(name);
    if (it == aten.end()) continue;
    EXPECT_EQ(value, it->second) << name;
    ++compared;
  }
  EXPECT_GE(compared, 30u);
}

TEST(HostCheck, NoTorchSkipsTheTorchVersion) {
  // The lite runtime's host has no torch (0.0): a package of any torch passes that check.
  Manifest m = cpu_manifest("");
  m.torch_version = "2.99.0";
  HostInfo host;
  EXPECT_NO_THROW(check_host(m, "p.pt2", host));
  host.torch_major = 2;
  host.torch_minor = 13;
  expect_mismatch(m, host, "was built with torch 2.99.0");
}

TEST(HostCheck, FixturePackagesFitThisHost) {
  // They were compiled on this machine, so the real host check must accept them.
  for (const char* name : {"tutorial.pt2", "nested.pt2"}) {
    const std::string path = test::package_path(name);
    EXPECT_NO_THROW(check_host(read_manifest(path), path, current_host())) << name;
    // The lite runtime's host (CPUID, no torch) accepts them too.
    HostInfo lite_host;
    lite_host.cpu_features = cpu_features();
    EXPECT_NO_THROW(check_host(read_manifest(path), path, lite_host)) << name;
  }
}

// The guards on real packages whose manifests were rewritten to describe another build: each
// must refuse at load, before AOTInductor dlopens the library.
struct ForeignPackage {
  const char* name;
  std::function<void(nlohmann::json&)> edit;
  std::string message;  // after "package '<path>' "
};

const std::string kThisTorch =
    std::to_string(TORCH_VERSION_MAJOR) + "." + std::to_string(TORCH_VERSION_MINOR);
const std::string kNextTorch = std::to_string(TORCH_VERSION_MAJOR) + "." +
                               std::to_string(TORCH_VERSION_MINOR + 1) + ".0";

TEST(HostCheck, PolicyRefusesForeignPackagesBeforeLoading) {
  const std::vector<ForeignPackage> cases = {
      {"old_torch", [](nlohmann::json& m) { m["torch_version"] = "1.0.0"; },
       "was built with torch 1.0.0"},
      // The next minor after this runtime's torch (a literal 2.14.0 is accepted by a 2.14 build).
      {"next_torch", [](nlohmann::json& m) { m["torch_version"] = kNextTorch; },
       "was built with torch " + kNextTorch + " but this runtime uses torch " + kThisTorch},
      {"arm", [](nlohmann::json& m) { m["cpu_isa"] = "neon"; },
       "was built for cpu_isa 'neon', but 'neon' is not a CPU feature this host has"},
      {"future_x86", [](nlohmann::json& m) { m["cpu_isa"] = "avx10_2"; },
       "was built for cpu_isa 'avx10_2', but 'avx10_2' is not a CPU feature this host has (or "
       "this runtime knows)"},
      {"cuda", [](nlohmann::json& m) { m["device"] = "cuda"; },
       "was built for device 'cuda', but CUDA is not available on this host"},
  };
  for (const auto& foreign : cases) {
    SCOPED_TRACE(foreign.name);
    if (std::string(foreign.name) == "cuda" && current_host().cuda_available) continue;
    test::TempDir dir;
    const std::string path = dir.file(std::string(foreign.name) + ".pt2");
    test::rewrite_manifest(test::package_path("tutorial.pt2"), path, foreign.edit);
    const auto error = catch_error<HostMismatchError>([&] { Policy policy(path); });
    ASSERT_TRUE(error);
    EXPECT_TRUE(Contains(error->what(), "package '" + path + "' " + foreign.message));
    EXPECT_EQ(error->path(), path);
  }
}

}  // namespace
}  // namespace tdaot::detail
