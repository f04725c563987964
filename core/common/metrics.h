// Prometheus metrics (text exposition format 0.0.4) for every service's /metrics.
//
// A MetricsRegistry owns metric families; each family has a name, help text and type, and holds
// one series per distinct label set. Add* returns a reference to the series, stable for the
// registry's lifetime; asking again for the same name and labels returns the same series. Reusing
// a name with another type, help text or label-name set is a programming error and aborts with a
// message (names are fixed strings in code, never user input). Names must match
// [a-zA-Z_:][a-zA-Z0-9_:]*; label values are escaped (\\, \", \n) when rendered.
//
// Counters, gauges and histograms are lock-free to update and safe from any thread. Collectors
// (callbacks run at Render time) export values that live elsewhere, e.g. a Transport's Metrics
// snapshot or RocksDB properties; they must be thread-safe and quick.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"

namespace glimpse::metrics {

using Labels = std::vector<std::pair<std::string, std::string>>;  // name -> value, in order

class Counter {
 public:
  void Increment(double by = 1.0);  // by >= 0
  double value() const;

 private:
  std::atomic<double> value_{0.0};
};

class Gauge {
 public:
  void Set(double v);
  void Add(double by);
  double value() const;

 private:
  std::atomic<double> value_{0.0};
};

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);  // sorted, finite; +Inf is implicit
  void Observe(double v);
  // Cumulative counts per bucket (the last is +Inf), the sum and the count.
  std::vector<uint64_t> cumulative_counts() const;
  double sum() const;
  uint64_t count() const;
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }

 private:
  const std::vector<double> upper_bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> counts_;  // per bucket, not cumulative
  std::atomic<double> sum_{0.0};
  std::atomic<uint64_t> count_{0};
};

// Latency buckets in seconds, 100 µs .. 60 s.
std::vector<double> LatencyBuckets();

// Written to by collectors at Render time: one sample per call.
class SampleWriter {
 public:
  virtual ~SampleWriter() = default;
  virtual void Counter(std::string_view name, std::string_view help, const Labels& labels,
                       double value) = 0;
  virtual void Gauge(std::string_view name, std::string_view help, const Labels& labels,
                     double value) = 0;
};

class MetricsRegistry {
 public:
  MetricsRegistry();
  ~MetricsRegistry();  // out of line: Family is defined in metrics.cc
  MetricsRegistry(const MetricsRegistry&) = delete;
  MetricsRegistry& operator=(const MetricsRegistry&) = delete;

  Counter& AddCounter(std::string_view name, std::string_view help, const Labels& labels = {});
  Gauge& AddGauge(std::string_view name, std::string_view help, const Labels& labels = {});
  Histogram& AddHistogram(std::string_view name, std::string_view help,
                          std::vector<double> upper_bounds, const Labels& labels = {});
  void AddCollector(std::function<void(SampleWriter&)> collector);

  // The whole registry in the text exposition format (families sorted by name, then collector
  // samples grouped by family), ending with a newline.
  std::string Render() const;

 private:
  struct Family;
  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Family>, std::less<>> families_ ABSL_GUARDED_BY(mu_);
  std::vector<std::function<void(SampleWriter&)>> collectors_ ABSL_GUARDED_BY(mu_);
};

}  // namespace glimpse::metrics
