// tdaot::stats: latency statistics the way tdaot reports them (tdaot-run bench and soak, the
// benchmarks' C++ server, the robot_service example). Header-only, standard library only, so a
// service can use it without linking anything.
//
// Percentiles are nearest-rank: the p-th percentile of n samples is the ceil(p * n)-th smallest
// (the smallest for p = 0). It is always a value that was measured, never an interpolation, and
// p99.9 of 1,000 samples is their maximum. tdaot's Python benchmarks use the same definition.
//
//   std::vector<double> micros = ...;                 // one latency per call, any order
//   tdaot::stats::Summary s = tdaot::stats::summarize(micros);
//   std::cout << tdaot::stats::format_us(s);          // "p50 4.1 us  p99 6.0 us  p99.9 ..."
//
// For long runs, LatencyHistogram keeps constant memory (percentiles within 1.6 %).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <iomanip>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

namespace tdaot::stats {

// The 1-based nearest rank of the p-th percentile (0 <= p <= 1) among `count` > 0 samples:
// ceil(p * count), at least 1 and at most `count`.
inline uint64_t nearest_rank(double p, uint64_t count) {
  const auto rank = static_cast<uint64_t>(std::ceil(p * static_cast<double>(count)));
  return std::clamp<uint64_t>(rank, 1, count);
}

// The nearest-rank p-th percentile of samples sorted in ascending order; 0 when there are none.
inline double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0.0;
  return sorted[nearest_rank(p, sorted.size()) - 1];
}

// What tdaot reports of a latency distribution, in the unit of the samples.
struct Summary {
  uint64_t count = 0;
  double p50 = 0.0;
  double p99 = 0.0;
  double p999 = 0.0;
  double max = 0.0;
  double mean = 0.0;
};

// The summary of `samples`, in any order (the copy taken is sorted); all zeros for none.
inline Summary summarize(std::vector<double> samples) {
  Summary summary;
  if (samples.empty()) return summary;
  std::sort(samples.begin(), samples.end());
  summary.count = samples.size();
  summary.p50 = percentile(samples, 0.5);
  summary.p99 = percentile(samples, 0.99);
  summary.p999 = percentile(samples, 0.999);
  summary.max = samples.back();
  summary.mean = std::accumulate(samples.begin(), samples.end(), 0.0) /
                 static_cast<double>(samples.size());
  return summary;
}

// "p50 4.1 us  p99 6.0 us  p99.9 12.3 us  max 40.2 us": a summary in microseconds, one decimal.
inline std::string format_us(const Summary& summary) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "p50 " << summary.p50 << " us  p99 " << summary.p99
      << " us  p99.9 " << summary.p999 << " us  max " << summary.max << " us";
  return out.str();
}

// Call latencies in nanoseconds, counted in buckets 1/64 of a power of two wide (exact below
// 128 ns): constant memory (about 29 KiB) however many calls a run makes, so a soak's own
// bookkeeping does not grow the memory it measures, and percentiles within 1.6 %. add()
// allocates nothing.
class LatencyHistogram {
 public:
  LatencyHistogram() : counts_(kBuckets, 0) {}

  void add(uint64_t ns) {
    ++counts_[index(ns)];
    ++count_;
    sum_ += ns;
    max_ = std::max(max_, ns);
  }
  uint64_t count() const { return count_; }
  double max_us() const { return static_cast<double>(max_) / 1e3; }
  double mean_us() const {
    return count_ ? static_cast<double>(sum_) / static_cast<double>(count_) / 1e3 : 0.0;
  }
  // The nearest-rank percentile: the middle of its bucket (at most the max), in microseconds;
  // 0 when nothing was added.
  double percentile_us(double p) const {
    if (count_ == 0) return 0.0;
    const uint64_t rank = nearest_rank(p, count_);
    uint64_t seen = 0;
    for (size_t i = 0; i < counts_.size(); ++i) {
      seen += counts_[i];
      if (seen >= rank) return std::min(middle(i), static_cast<double>(max_)) / 1e3;
    }
    return max_us();
  }
  // p50, p99, p99.9, max and mean in microseconds.
  Summary summary_us() const {
    Summary summary;
    summary.count = count_;
    summary.p50 = percentile_us(0.5);
    summary.p99 = percentile_us(0.99);
    summary.p999 = percentile_us(0.999);
    summary.max = max_us();
    summary.mean = mean_us();
    return summary;
  }

 private:
  static constexpr size_t kExact = 128;
  static constexpr size_t kBuckets = kExact + (64 - 7) * 64;
  static size_t index(uint64_t ns) {
    if (ns < kExact) return static_cast<size_t>(ns);
    const int exponent = 63 - __builtin_clzll(ns);  // 7..63: ns >> (exponent - 6) is 64..127
    return kExact + static_cast<size_t>(exponent - 7) * 64 +
           static_cast<size_t>((ns >> (exponent - 6)) - 64);
  }
  static double middle(size_t i) {
    if (i < kExact) return static_cast<double>(i);
    const size_t exponent = (i - kExact) / 64 + 7;
    const size_t sub = (i - kExact) % 64 + 64;
    return (static_cast<double>(sub) + 0.5) * std::ldexp(1.0, static_cast<int>(exponent) - 6);
  }
  std::vector<uint64_t> counts_;
  uint64_t count_ = 0;
  uint64_t sum_ = 0;
  uint64_t max_ = 0;
};

}  // namespace tdaot::stats
