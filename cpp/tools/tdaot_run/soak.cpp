// tdaot-run soak PKG: a memory-growth check. It makes N calls (default 1,000,000) on fixed random
// inputs, Session::step_positional for a recurrent package (or with --session), else
// run_positional, and reads the resident set (/proc/self/statm) at S + 1 evenly spaced calls and
// at the end of the warm-up (the first W calls, default N / 10). It prints the RSS at the start,
// the end of the warm-up, its max after it and at the end, the growth from the end of the warm-up
// to the end, and latency percentiles of the calls after the warm-up; it fails (kSoakFailed)
// when the growth exceeds K KiB (--max-growth-kib, 1024).
#include <fcntl.h>
#include <malloc.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iomanip>
#include <iostream>
#include <limits>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>

#include "common.h"
#include "tdaot/torch/session.h"
#include "tdaot/service/stats.h"

namespace tdaot::tool {
namespace {

using nlohmann::json;

struct SoakOptions {
  std::string package;
  int64_t batch = -1;  // unset: the package's smallest batch
  int64_t calls = 1000000;
  int samples = 100;
  int64_t warmup_calls = -1;  // unset: calls / 10
  int64_t max_growth_kib = 1024;
  bool session = false;
  uint64_t seed = 0;
  bool json = false;
  LoadFlags load;
};

// The process's resident set now, its file-backed part (mapped libraries), and the bytes the
// program holds from malloc (glibc's count, -1 elsewhere), in KiB. RSS growing while the heap in
// use does not is the allocator keeping freed memory, not a leak.
struct Rss {
  int64_t resident_kib = 0;
  int64_t file_kib = 0;
  int64_t heap_kib = -1;
};

int64_t heap_in_use_kib() {
#if defined(__GLIBC__) && (__GLIBC__ > 2 || __GLIBC_MINOR__ >= 33)
  const struct mallinfo2 info = ::mallinfo2();
  return static_cast<int64_t>((info.uordblks + info.hblkhd) / 1024);
#else
  return -1;
#endif
}

Rss current_rss() {
  // statm: size resident shared text lib data dt, in pages. Read with open/read: no allocation.
  const int fd = ::open("/proc/self/statm", O_RDONLY | O_CLOEXEC);
  char text[256];
  const ssize_t n = fd < 0 ? -1 : ::read(fd, text, sizeof(text) - 1);
  if (fd >= 0) ::close(fd);
  long long size = 0, resident = 0, shared = 0;
  if (n <= 0 ||
      (text[n] = '\0', std::sscanf(text, "%lld %lld %lld", &size, &resident, &shared) != 3)) {
    throw Error("soak: cannot read the resident set from /proc/self/statm");
  }
  static const int64_t page_kib = ::sysconf(_SC_PAGESIZE) / 1024;
  return {resident * page_kib, shared * page_kib, heap_in_use_kib()};
}

struct RssSample {
  int64_t call;  // calls made before the sample
  double seconds;
  Rss rss;
};

// Least-squares slope of the RSS (KiB per million calls) over `begin`..`end`: a leak is a
// trend, a one-off allocation (a cache filled late) is a step.
template <typename It>
double rss_slope(It begin, It end) {
  double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
  for (auto it = begin; it != end; ++it) {
    const double x = static_cast<double>(it->call) / 1e6;
    const double y = static_cast<double>(it->rss.resident_kib);
    n += 1, sx += x, sy += y, sxx += x * x, sxy += x * y;
  }
  const double denominator = n * sxx - sx * sx;
  return n >= 2 && denominator > 0 ? (n * sxy - sx * sy) / denominator : 0.0;
}

// Runs `calls` calls on fixed random inputs (run_positional, or Session::step_positional for a
// recurrent package), reading the RSS at evenly spaced calls; fails (kSoakFailed) when it grew
// by more than --max-growth-kib between the end of the warm-up and the end.
ExitCode soak(const SoakOptions& options) {
  if (options.warmup_calls >= options.calls) {
    throw UsageError("--warmup-calls " + std::to_string(options.warmup_calls) +
                     " leaves no calls to measure: it must be less than --calls " +
                     std::to_string(options.calls));
  }
  const Policy policy(options.package, options.load.policy_options());
  const Manifest& m = policy.manifest();
  const int64_t batch = batch_size(options.batch, m);
  std::optional<Session> session;
  if (options.session || m.recurrent) session.emplace(policy, batch);
  const auto inputs = session ? make_tensors(session->inputs(), m.device, batch, true, options.seed)
                              : make_inputs(m, batch, /*random=*/true, options.seed);
  const int64_t calls = options.calls;
  const int64_t warmup = options.warmup_calls >= 0 ? options.warmup_calls : calls / 10;

  // Where to read the RSS: calls * k / samples for k = 0..samples, and the end of the warm-up.
  std::vector<int64_t> points{warmup};
  for (int k = 0; k <= options.samples; ++k) points.push_back(calls * k / options.samples);
  std::sort(points.begin(), points.end());
  points.erase(std::unique(points.begin(), points.end()), points.end());
  std::vector<RssSample> samples;
  samples.reserve(points.size());
  stats::LatencyHistogram histogram;

  using Clock = std::chrono::steady_clock;
  const auto start = Clock::now();
  const auto take_sample = [&](int64_t call) {
    samples.push_back(
        {call, std::chrono::duration<double>(Clock::now() - start).count(), current_rss()});
  };
  size_t next = 0;
  for (int64_t call = 0; call < calls; ++call) {
    if (call == points[next]) {
      take_sample(call);
      ++next;
    }
    const auto t0 = Clock::now();
    if (session) {
      session->step_positional(inputs);
    } else {
      policy.run_positional(inputs);
    }
    const auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now() - t0);
    if (call >= warmup) histogram.add(static_cast<uint64_t>(ns.count()));
  }
  take_sample(calls);
  const double seconds = samples.back().seconds;

  const auto at_warmup = std::find_if(samples.begin(), samples.end(),
                                      [&](const RssSample& s) { return s.call == warmup; });
  const RssSample& warm = *at_warmup;
  const RssSample& last = samples.back();
  const auto peak =
      std::max_element(at_warmup, samples.end(), [](const RssSample& a, const RssSample& b) {
        return a.rss.resident_kib < b.rss.resident_kib;
      });
  const int64_t growth = last.rss.resident_kib - warm.rss.resident_kib;
  const int64_t file_growth = last.rss.file_kib - warm.rss.file_kib;
  const bool heap_known = last.rss.heap_kib >= 0;
  const int64_t heap_growth = last.rss.heap_kib - warm.rss.heap_kib;
  const bool passed = growth <= options.max_growth_kib;
  const double slope = rss_slope(at_warmup, samples.end());
  const double calls_per_s = static_cast<double>(calls) / seconds;
  const stats::Summary latency = histogram.summary_us();
  const char* mode = session ? "session" : "run_positional";

  if (options.json) {
    nlohmann::ordered_json rss_curve = json::array();
    for (const auto& s : samples) {
      rss_curve.push_back({{"call", s.call},
                           {"seconds", s.seconds},
                           {"rss_kib", s.rss.resident_kib},
                           {"file_kib", s.rss.file_kib},
                           {"heap_kib", heap_known ? json(s.rss.heap_kib) : json(nullptr)}});
    }
    nlohmann::ordered_json out = {
        {"package", options.package},
        {"mode", mode},
        {"batch", batch},
        {"calls", calls},
        {"warmup_calls", warmup},
        {"seconds", seconds},
        {"calls_per_s", calls_per_s},
        {"rss_start_kib", samples.front().rss.resident_kib},
        {"rss_warmup_kib", warm.rss.resident_kib},
        {"rss_max_kib", peak->rss.resident_kib},
        {"rss_final_kib", last.rss.resident_kib},
        {"growth_kib", growth},
        {"file_growth_kib", file_growth},
        {"heap_growth_kib", heap_known ? json(heap_growth) : json(nullptr)},
        {"slope_kib_per_million_calls", slope},
        {"max_growth_kib", options.max_growth_kib},
        {"passed", passed},
        {"latency_us",
         {{"p50", latency.p50},
          {"p99", latency.p99},
          {"p999", latency.p999},
          {"max", latency.max},
          {"mean", latency.mean}}},
        {"samples", rss_curve}};
    std::cout << out.dump(2) << "\n";
  } else {
    std::cout << options.package << ": soak of " << calls << " calls (" << mode << ", batch "
              << batch << "), the first " << warmup << " warm-up\n"
              << "  RSS KiB  start " << samples.front().rss.resident_kib << "  warm-up "
              << warm.rss.resident_kib << "  max " << peak->rss.resident_kib << "  final "
              << last.rss.resident_kib << "  (" << samples.size() << " samples)\n"
              << "  growth after warm-up " << growth << " KiB (file-backed " << file_growth
              << " KiB"
              << (heap_known ? ", malloc heap in use " + std::to_string(heap_growth) + " KiB" : "")
              << "), limit " << options.max_growth_kib << " KiB: " << (passed ? "ok" : "FAILED")
              << "\n"
              << "  latency after warm-up  " << stats::format_us(latency) << "\n"
              << std::fixed << std::setprecision(2) << "  " << seconds << " s, "
              << std::setprecision(0) << calls_per_s << " calls/s\n";
  }
  if (!passed) {
    std::cerr << "tdaot-run: soak failed: the RSS grew by " << growth << " KiB after warm-up ("
              << warm.rss.resident_kib << " KiB at call " << warm.call << ", "
              << last.rss.resident_kib << " KiB at call " << last.call
              << "), more than --max-growth-kib " << options.max_growth_kib << "\n";
    return kSoakFailed;
  }
  return kSuccess;
}

}  // namespace

Command add_soak(CLI::App& app) {
  auto options = std::make_shared<SoakOptions>();
  CLI::App* command = add_command(
      app, "soak", "many calls on fixed inputs with the RSS sampled: fails if it keeps growing",
      options->package);
  add_batch(command, options->batch);
  add_load_options(command, options->load);
  const auto positive = CLI::Range(int64_t{1}, std::numeric_limits<int64_t>::max());
  const auto non_negative = CLI::Range(int64_t{0}, std::numeric_limits<int64_t>::max());
  command->add_option("--calls", options->calls, "calls in all, warm-up included")
      ->check(positive)
      ->capture_default_str();
  command->add_option("--samples", options->samples, "RSS readings at evenly spaced calls (+1)")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  command
      ->add_option("--warmup-calls", options->warmup_calls,
                   "calls before the RSS baseline (default: a tenth of --calls)")
      ->check(non_negative);
  command
      ->add_option("--max-growth-kib", options->max_growth_kib,
                   "fail (exit 3) when the RSS grows by more after the warm-up")
      ->check(non_negative)
      ->capture_default_str();
  command->add_flag("--session", options->session,
                    "step a tdaot::Session (the default for a recurrent package)");
  command->add_option("--seed", options->seed, "seed of the random inputs")->capture_default_str();
  command->add_flag("--json", options->json, "print the results (and the RSS curve) as JSON");
  return {command, [options] { return soak(*options); }};
}

}  // namespace tdaot::tool
