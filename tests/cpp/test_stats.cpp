// tdaot/stats.h: nearest-rank percentiles and summaries on known inputs, and the soak's
// constant-memory histogram against the exact percentiles.
#include "tdaot/service/stats.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using tdaot::stats::LatencyHistogram;
using tdaot::stats::nearest_rank;
using tdaot::stats::percentile;
using tdaot::stats::summarize;

TEST(Stats, NearestRankIsCeilOfPTimesNWithinOneToN) {
  EXPECT_EQ(nearest_rank(0.5, 4), 2u);
  EXPECT_EQ(nearest_rank(0.5, 5), 3u);
  EXPECT_EQ(nearest_rank(0.99, 1000), 990u);
  EXPECT_EQ(nearest_rank(0.999, 1000), 999u);
  EXPECT_EQ(nearest_rank(0.999, 100), 100u);
  EXPECT_EQ(nearest_rank(0.0, 10), 1u);
  EXPECT_EQ(nearest_rank(1.0, 10), 10u);
  EXPECT_EQ(nearest_rank(0.5, 1), 1u);
}

TEST(Stats, PercentileOfOneToHundred) {
  std::vector<double> sorted;
  for (int i = 1; i <= 100; ++i) sorted.push_back(i);
  EXPECT_EQ(percentile(sorted, 0.5), 50.0);
  EXPECT_EQ(percentile(sorted, 0.99), 99.0);
  EXPECT_EQ(percentile(sorted, 0.999), 100.0);
  EXPECT_EQ(percentile(sorted, 0.0), 1.0);
  EXPECT_EQ(percentile({}, 0.5), 0.0);
}

TEST(Stats, SummarizeSortsItsCopy) {
  const std::vector<double> samples{5.0, 1.0, 4.0, 2.0, 3.0, 10.0};
  const auto s = summarize(samples);
  EXPECT_EQ(s.count, 6u);
  EXPECT_EQ(s.p50, 3.0);
  EXPECT_EQ(s.p99, 10.0);
  EXPECT_EQ(s.p999, 10.0);
  EXPECT_EQ(s.max, 10.0);
  EXPECT_DOUBLE_EQ(s.mean, 25.0 / 6.0);
  EXPECT_EQ(samples.front(), 5.0);  // the caller's vector is left alone
}

TEST(Stats, SummarizeNothingIsZero) {
  const auto s = summarize({});
  EXPECT_EQ(s.count, 0u);
  EXPECT_EQ(s.p50, 0.0);
  EXPECT_EQ(s.max, 0.0);
  EXPECT_EQ(s.mean, 0.0);
}

TEST(Stats, FormatUs) {
  tdaot::stats::Summary s;
  s.p50 = 4.14;
  s.p99 = 6.0;
  s.p999 = 12.345;
  s.max = 40.16;
  EXPECT_EQ(tdaot::stats::format_us(s), "p50 4.1 us  p99 6.0 us  p99.9 12.3 us  max 40.2 us");
}

TEST(Stats, HistogramIsExactBelow128Ns) {
  LatencyHistogram histogram;
  for (uint64_t ns = 1; ns <= 100; ++ns) histogram.add(ns);
  EXPECT_EQ(histogram.count(), 100u);
  EXPECT_DOUBLE_EQ(histogram.percentile_us(0.5), 0.050);
  EXPECT_DOUBLE_EQ(histogram.percentile_us(0.99), 0.099);
  EXPECT_DOUBLE_EQ(histogram.max_us(), 0.100);
  EXPECT_DOUBLE_EQ(histogram.mean_us(), 0.0505);
  EXPECT_EQ(LatencyHistogram().percentile_us(0.5), 0.0);
}

TEST(Stats, HistogramPercentilesWithinOnePointSixPercentOfExact) {
  std::mt19937_64 generator(7);
  std::lognormal_distribution<double> latency(9.0, 1.5);  // ns: median ~8 us, a long tail
  LatencyHistogram histogram;
  std::vector<double> exact;
  for (int i = 0; i < 20000; ++i) {
    const auto ns = static_cast<uint64_t>(latency(generator)) + 1;
    histogram.add(ns);
    exact.push_back(static_cast<double>(ns) / 1e3);
  }
  const auto s = histogram.summary_us();
  const auto reference = summarize(exact);
  EXPECT_EQ(s.count, reference.count);
  EXPECT_NEAR(s.p50, reference.p50, 0.016 * reference.p50);
  EXPECT_NEAR(s.p99, reference.p99, 0.016 * reference.p99);
  EXPECT_NEAR(s.p999, reference.p999, 0.016 * reference.p999);
  EXPECT_DOUBLE_EQ(s.max, reference.max);
  EXPECT_LE(s.p999, s.max);
  EXPECT_NEAR(s.mean, reference.mean, 1e-9 * reference.mean);
}

}  // namespace
