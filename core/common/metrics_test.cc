#include "core/common/metrics.h"

#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace glimpse::metrics {
namespace {

TEST(MetricsTest, RendersSmallRegistryExactly) {
  MetricsRegistry registry;
  registry.AddCounter("glimpse_requests_total", "Requests served.", {{"method", "get"}})
      .Increment(3);
  registry.AddCounter("glimpse_requests_total", "Requests served.", {{"method", "put"}})
      .Increment();
  registry.AddGauge("glimpse_bytes", "Bytes held.\nSecond line with \\.").Set(1.5);
  Histogram& h = registry.AddHistogram("glimpse_latency_seconds", "Latency.", {0.5, 1},
                                       {{"path", "a\"b\\c\nd"}});
  h.Observe(0.25);
  h.Observe(0.75);
  h.Observe(2);
  const std::string expected =
      "# HELP glimpse_bytes Bytes held.\\nSecond line with \\\\.\n"
      "# TYPE glimpse_bytes gauge\n"
      "glimpse_bytes 1.5\n"
      "# HELP glimpse_latency_seconds Latency.\n"
      "# TYPE glimpse_latency_seconds histogram\n"
      "glimpse_latency_seconds_bucket{path=\"a\\\"b\\\\c\\nd\",le=\"0.5\"} 1\n"
      "glimpse_latency_seconds_bucket{path=\"a\\\"b\\\\c\\nd\",le=\"1\"} 2\n"
      "glimpse_latency_seconds_bucket{path=\"a\\\"b\\\\c\\nd\",le=\"+Inf\"} 3\n"
      "glimpse_latency_seconds_sum{path=\"a\\\"b\\\\c\\nd\"} 3\n"
      "glimpse_latency_seconds_count{path=\"a\\\"b\\\\c\\nd\"} 3\n"
      "# HELP glimpse_requests_total Requests served.\n"
      "# TYPE glimpse_requests_total counter\n"
      "glimpse_requests_total{method=\"get\"} 3\n"
      "glimpse_requests_total{method=\"put\"} 1\n";
  EXPECT_EQ(registry.Render(), expected);
}

TEST(MetricsTest, CollectorSamplesFollowRegisteredFamilies) {
  MetricsRegistry registry;
  registry.AddCounter("a_total", "A.").Increment(2);
  registry.AddCollector([](SampleWriter& w) {
    w.Gauge("z_open", "Open files.", {}, 7);
    w.Counter("b_sent_bytes_total", "Sent.", {{"peer", "n1"}}, 10);
    w.Counter("b_sent_bytes_total", "Sent.", {{"peer", "n2"}}, 20);
    w.Gauge("a_total", "Clashes with a registered family.", {}, 99);
    w.Gauge("bad name", "Invalid.", {}, 1);
  });
  EXPECT_EQ(registry.Render(),
            "# HELP a_total A.\n# TYPE a_total counter\na_total 2\n"
            "# HELP b_sent_bytes_total Sent.\n# TYPE b_sent_bytes_total counter\n"
            "b_sent_bytes_total{peer=\"n1\"} 10\nb_sent_bytes_total{peer=\"n2\"} 20\n"
            "# HELP z_open Open files.\n# TYPE z_open gauge\nz_open 7\n");
}

TEST(MetricsTest, SameNameAndLabelsReturnSameSeries) {
  MetricsRegistry registry;
  Counter& a = registry.AddCounter("x_total", "X.", {{"k", "v"}});
  Counter& b = registry.AddCounter("x_total", "X.", {{"k", "v"}});
  Counter& c = registry.AddCounter("x_total", "X.", {{"k", "w"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
}

TEST(MetricsTest, SpecialValuesUsePrometheusSpelling) {
  MetricsRegistry registry;
  registry.AddGauge("g_inf", "I.").Set(std::numeric_limits<double>::infinity());
  registry.AddGauge("g_nan", "N.").Set(std::numeric_limits<double>::quiet_NaN());
  registry.AddGauge("g_small", "S.").Set(0.1);
  EXPECT_EQ(registry.Render(),
            "# HELP g_inf I.\n# TYPE g_inf gauge\ng_inf +Inf\n"
            "# HELP g_nan N.\n# TYPE g_nan gauge\ng_nan NaN\n"
            "# HELP g_small S.\n# TYPE g_small gauge\ng_small 0.1\n");
}

TEST(MetricsTest, HistogramCountsBoundaryValueInItsBucket) {
  Histogram h({1, 2});
  h.Observe(1);  // le="1" includes 1
  h.Observe(3);
  EXPECT_EQ(h.cumulative_counts(), (std::vector<uint64_t>{1, 1, 2}));
  EXPECT_EQ(h.count(), 2u);
  EXPECT_DOUBLE_EQ(h.sum(), 4);
}

TEST(MetricsTest, CounterIgnoresNegativeIncrements) {
  Counter c;
  c.Increment(2);
  c.Increment(-1);
  EXPECT_EQ(c.value(), 2);
}

TEST(MetricsTest, ConcurrentUpdatesAreNotLost) {
  MetricsRegistry registry;
  Counter& c = registry.AddCounter("c_total", "C.");
  Histogram& h = registry.AddHistogram("h", "H.", LatencyBuckets());
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        c.Increment();
        h.Observe(0.001);
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(c.value(), 40000);
  EXPECT_EQ(h.count(), 40000u);
}

TEST(MetricsDeathTest, ReusingNameWithAnotherTypeAborts) {
  MetricsRegistry registry;
  registry.AddCounter("m", "M.");
  EXPECT_DEATH(registry.AddGauge("m", "M."), "another type");
}

TEST(MetricsDeathTest, InvalidNameAborts) {
  MetricsRegistry registry;
  EXPECT_DEATH(registry.AddCounter("1bad", "B."), "invalid metric name");
}

}  // namespace
}  // namespace glimpse::metrics
