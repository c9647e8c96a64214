// MetricRegistry: cells per series, counter/gauge/histogram semantics,
// misuse counting, snapshots that add up (RapidCheck), and concurrent
// writers that lose nothing (run under TSan: label concurrency).
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <rapidcheck.h>
#include <rapidcheck/gtest.h>

#include "meridian/metrics.h"

namespace meridian::telemetry {
namespace {

const FamilySnapshot& family(const std::vector<FamilySnapshot>& snap, MetricId id) {
  return snap.at(static_cast<std::size_t>(id));
}

TEST(MetricCatalog, NamesAreUniquePrometheusLegalAndFollowTheConventions) {
  std::set<std::string_view> names;
  for (const MetricSpec& s : metric_catalog()) {
    EXPECT_TRUE(names.insert(s.name).second) << s.name;
    EXPECT_EQ(s.name.rfind("meridian_", 0), 0U) << s.name;
    EXPECT_EQ(s.name.find("vllm"), std::string_view::npos) << s.name;
    for (const char c : s.name)
      EXPECT_TRUE(std::isalnum(static_cast<unsigned char>(c)) || c == '_') << s.name;
    const bool total = s.name.size() > 6 && s.name.substr(s.name.size() - 6) == "_total";
    EXPECT_EQ(total, s.type == MetricType::kCounter) << s.name;
    EXPECT_LE(s.labels.size(), kMaxLabels) << s.name;
    EXPECT_EQ(s.type == MetricType::kHistogram, !s.buckets.empty()) << s.name;
    for (std::size_t i = 1; i < s.buckets.size(); ++i) EXPECT_LT(s.buckets[i - 1], s.buckets[i]) << s.name;
    EXPECT_FALSE(s.help.empty()) << s.name;
    EXPECT_EQ(find_metric(s.name), static_cast<MetricId>(&s - metric_catalog().data()));
  }
  EXPECT_EQ(metric_catalog().size(), kMetricCount);
  EXPECT_FALSE(find_metric("meridian_no_such_metric").has_value());
}

TEST(MetricRegistry, StartsAtZeroWithEverySeriesOfEveryFamily) {
  MetricRegistry r;
  const auto snap = r.snapshot();
  ASSERT_EQ(snap.size(), kMetricCount);
  for (const FamilySnapshot& f : snap) {
    ASSERT_NE(f.spec, nullptr);
    EXPECT_EQ(f.series.size(), series_count(*f.spec)) << f.spec->name;
    std::set<std::vector<std::uint8_t>> combos;
    for (const SeriesSnapshot& s : f.series) {
      EXPECT_EQ(s.value, 0);
      EXPECT_EQ(s.count, 0U);
      if (f.spec->type == MetricType::kHistogram) {
        EXPECT_EQ(s.bucket_counts.size(), f.spec->buckets.size() + 1);
      }
      combos.insert(
          {s.label_index.begin(), s.label_index.begin() + static_cast<long>(f.spec->labels.size())});
    }
    EXPECT_EQ(combos.size(), f.series.size()) << f.spec->name << ": label combinations repeat";
  }
}

TEST(MetricRegistry, CountersAddGaugesSetCountersMirrorWithoutGoingBack) {
  MetricRegistry r;
  r.add(MetricId::kSchedulerSteps, 2);
  r.add(MetricId::kSchedulerSteps, 0.5);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerSteps), 2.5);
  r.add(MetricId::kSchedulerSteps, -1);  // ignored: counters never go down
  r.add(MetricId::kSchedulerSteps, std::numeric_limits<double>::quiet_NaN());
  r.add(MetricId::kSchedulerSteps, std::numeric_limits<double>::infinity());
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerSteps), 2.5);
  r.set(MetricId::kSchedulerSteps, 10);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerSteps), 10);
  r.set(MetricId::kSchedulerSteps, 7);  // a smaller mirrored total is ignored
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerSteps), 10);
  r.set(MetricId::kSchedulerSteps, std::numeric_limits<double>::infinity());  // ignored, not pinned
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerSteps), 10);

  r.set(MetricId::kQueueDepth, 5, {1});
  r.set(MetricId::kQueueDepth, 3, {1});  // gauges go both ways
  EXPECT_DOUBLE_EQ(r.value(MetricId::kQueueDepth, {1}), 3);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kQueueDepth, {0}), 0);

  r.add(MetricId::kPreemptions, 1, {1, 2});
  const auto snap = r.snapshot();
  for (const SeriesSnapshot& s : family(snap, MetricId::kPreemptions).series) {
    const bool hit = s.label_index[0] == 1 && s.label_index[1] == 2;
    EXPECT_EQ(s.value, hit ? 1 : 0);
  }
  EXPECT_EQ(r.misuse_count(), 0U);
}

TEST(MetricRegistry, HistogramBucketsAreInclusiveUpperBoundsWithInfLast) {
  MetricRegistry r;
  // kSchedulerBatchSize buckets: 1, 2, 4, ..., 1024.
  r.observe(MetricId::kSchedulerBatchSize, 1, {0});                                         // le=1
  r.observe(MetricId::kSchedulerBatchSize, 1.5, {0});                                       // le=2
  r.observe(MetricId::kSchedulerBatchSize, 2, {0});                                         // le=2
  r.observe(MetricId::kSchedulerBatchSize, 5000, {0});                                      // +Inf
  r.observe(MetricId::kSchedulerBatchSize, std::numeric_limits<double>::quiet_NaN(), {0});  // ignored
  const auto snap = r.snapshot();
  const SeriesSnapshot& s = family(snap, MetricId::kSchedulerBatchSize).series[0];
  ASSERT_EQ(s.bucket_counts.size(), 12U);
  EXPECT_EQ(s.bucket_counts[0], 1U);
  EXPECT_EQ(s.bucket_counts[1], 2U);
  EXPECT_EQ(s.bucket_counts[11], 1U);
  EXPECT_EQ(s.count, 4U);
  EXPECT_DOUBLE_EQ(s.sum, 5004.5);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerBatchSize, {0}), 4);
  EXPECT_EQ(r.misuse_count(), 0U);
}

TEST(MetricRegistry, MisuseIsIgnoredAndCounted) {
  MetricRegistry r;
  r.add(MetricId::kPreemptions, 1, {0});             // too few labels
  r.add(MetricId::kPreemptions, 1, {2, 0});          // phase index out of range
  r.add(MetricId::kSchedulerSteps, 1, {0});          // labels on an unlabelled metric
  r.add(MetricId::kQueueDepth, 1, {0});              // add on a gauge
  r.set(MetricId::kRequestTtft, 1);                  // set on a histogram
  r.observe(MetricId::kSchedulerSteps, 1);           // observe on a counter
  r.observe(MetricId::kSchedulerBatchSize, 1, {3});  // index out of range
  (void)r.value(MetricId::kQueueDepth, {9});
  (void)r.value(MetricId::kCount);
  EXPECT_EQ(r.misuse_count(), 9U);
  for (const FamilySnapshot& f : r.snapshot()) {
    for (const SeriesSnapshot& s : f.series) EXPECT_EQ(s.value, 0) << f.spec->name;
  }
}

// For any sequence of adds and observes, the snapshot holds exactly their sums.
RC_GTEST_PROP(MetricRegistryProperty, SnapshotEqualsTheSumsOfWhatWasRecorded, ()) {
  MetricRegistry r;
  std::map<std::pair<std::size_t, std::size_t>, double> expect_value;
  std::map<std::pair<std::size_t, std::size_t>, std::uint64_t> expect_count;
  const auto ops =
      *rc::gen::container<std::vector<std::tuple<std::uint8_t, std::uint8_t, std::uint8_t, int>>>(
          rc::gen::tuple(rc::gen::arbitrary<std::uint8_t>(), rc::gen::arbitrary<std::uint8_t>(),
                         rc::gen::arbitrary<std::uint8_t>(), rc::gen::inRange(0, 100000)));
  for (const auto& [metric, a, b, raw] : ops) {
    const auto id = static_cast<MetricId>(metric % kMetricCount);
    const MetricSpec& s = spec(id);
    if (s.type == MetricType::kGauge) continue;
    std::uint8_t la = 0;
    std::uint8_t lb = 0;
    std::size_t series = 0;
    if (!s.labels.empty()) la = static_cast<std::uint8_t>(a % s.labels[0].values.size());
    if (s.labels.size() > 1) lb = static_cast<std::uint8_t>(b % s.labels[1].values.size());
    series = s.labels.size() > 1 ? la * s.labels[1].values.size() + lb : la;
    // Values on a 1/64 grid keep the double sums exact.
    const double v = raw / 64.0;
    const auto key = std::make_pair(static_cast<std::size_t>(id), series);
    if (s.type == MetricType::kCounter) {
      if (s.labels.empty())
        r.add(id, v);
      else if (s.labels.size() == 1)
        r.add(id, v, {la});
      else
        r.add(id, v, {la, lb});
      expect_value[key] += v;
    } else {
      if (s.labels.empty())
        r.observe(id, v);
      else
        r.observe(id, v, {la});
      expect_value[key] += v;
      ++expect_count[key];
    }
  }
  RC_ASSERT(r.misuse_count() == 0U);
  const auto snap = r.snapshot();
  for (std::size_t i = 0; i < snap.size(); ++i) {
    for (std::size_t k = 0; k < snap[i].series.size(); ++k) {
      const SeriesSnapshot& s = snap[i].series[k];
      const auto key = std::make_pair(i, k);
      const double want = expect_value.count(key) ? expect_value[key] : 0.0;
      if (snap[i].spec->type == MetricType::kCounter) RC_ASSERT(s.value == want);
      if (snap[i].spec->type == MetricType::kHistogram) {
        const std::uint64_t n = expect_count.count(key) ? expect_count[key] : 0;
        RC_ASSERT(s.sum == want);
        RC_ASSERT(s.count == n);
        std::uint64_t buckets = 0;
        for (const auto c : s.bucket_counts) buckets += c;
        RC_ASSERT(buckets == n);
      }
    }
  }
}

// Writers on several threads lose no increment (relaxed atomics are enough
// for totals); TSan checks there is no data race with a concurrent snapshot.
TEST(MetricRegistryConcurrency, ConcurrentAddsAndObservesLoseNothing) {
  MetricRegistry r;
  constexpr int kThreads = 4;
  constexpr int kPerThread = 20000;
  std::atomic<bool> stop{false};
  std::thread reader([&] {
    while (!stop.load()) {
      const auto snap = r.snapshot();
      const SeriesSnapshot& s = family(snap, MetricId::kOutputItl).series[0];
      std::uint64_t buckets = 0;
      for (const auto c : s.bucket_counts) buckets += c;
      // Cells are read one by one: the count may trail the buckets, never lead by more than the writers.
      EXPECT_LE(buckets, static_cast<std::uint64_t>(kThreads) * kPerThread);
    }
  });
  std::vector<std::thread> writers;
  for (int t = 0; t < kThreads; ++t) {
    writers.emplace_back([&r, t] {
      for (int i = 0; i < kPerThread; ++i) {
        r.add(MetricId::kSchedulerScheduledTokens, 1);
        r.add(MetricId::kPreemptions, 1, {static_cast<std::uint8_t>(t % 2), 1});
        r.observe(MetricId::kOutputItl, 0.001 * (i % 100));
      }
    });
  }
  for (auto& w : writers) w.join();
  stop = true;
  reader.join();
  const double total = static_cast<double>(kThreads) * kPerThread;
  EXPECT_DOUBLE_EQ(r.value(MetricId::kSchedulerScheduledTokens), total);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kPreemptions, {0, 1}) + r.value(MetricId::kPreemptions, {1, 1}), total);
  EXPECT_DOUBLE_EQ(r.value(MetricId::kOutputItl), total);
  const auto snap = r.snapshot();
  std::uint64_t buckets = 0;
  for (const auto c : family(snap, MetricId::kOutputItl).series[0].bucket_counts) buckets += c;
  EXPECT_EQ(buckets, static_cast<std::uint64_t>(total));
  EXPECT_EQ(r.misuse_count(), 0U);
}

}  // namespace
}  // namespace meridian::telemetry
