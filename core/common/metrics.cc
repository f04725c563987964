#include "core/common/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>

#include "absl/synchronization/mutex.h"

namespace glimpse::metrics {
namespace {

enum class Type { kCounter, kGauge, kHistogram };

const char* TypeName(Type type) {
  switch (type) {
    case Type::kCounter:
      return "counter";
    case Type::kGauge:
      return "gauge";
    case Type::kHistogram:
      return "histogram";
  }
  return "untyped";
}

[[noreturn]] void Die(std::string_view what, std::string_view name) {
  std::fprintf(stderr, "metrics: %.*s: '%.*s'\n", static_cast<int>(what.size()), what.data(),
               static_cast<int>(name.size()), name.data());
  std::abort();
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
    const bool ok = alpha || (allow_colon && c == ':') || (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

// Adds `by` to an atomic double. NOTE: a CAS loop rather than fetch_add so the code does not
// depend on the library's C++20 floating-point atomics.
void AtomicAdd(std::atomic<double>& a, double by) {
  double old = a.load(std::memory_order_relaxed);
  while (!a.compare_exchange_weak(old, old + by, std::memory_order_relaxed)) {
  }
}

// Shortest text that parses back to the same double; +Inf/-Inf/NaN as Prometheus spells them.
std::string FormatValue(double v) {
  if (std::isnan(v)) return "NaN";
  if (std::isinf(v)) return v > 0 ? "+Inf" : "-Inf";
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, result.ptr);
}

std::string EscapeHelp(std::string_view help) {
  std::string out;
  for (const char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  for (const char c : value) {
    if (c == '"') {
      out += "\\\"";
    } else {
      out += EscapeHelp(std::string_view(&c, 1));
    }
  }
  return out;
}

// `{a="x",b="y"}` (with `extra` appended, e.g. le="0.5"), or "" for no labels.
std::string FormatLabels(const Labels& labels, std::string_view extra = {}) {
  if (labels.empty() && extra.empty()) return "";
  std::string out = "{";
  for (const auto& [name, value] : labels) {
    if (out.size() > 1) out += ',';
    out += name + "=\"" + EscapeLabelValue(value) + "\"";
  }
  if (!extra.empty()) {
    if (out.size() > 1) out += ',';
    out += extra;
  }
  return out + "}";
}

void AppendHeader(std::string& out, std::string_view name, std::string_view help, Type type) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += EscapeHelp(help);
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += TypeName(type);
  out += '\n';
}

void AppendSample(std::string& out, std::string_view name, const std::string& labels, double v) {
  out += name;
  out += labels;
  out += ' ';
  out += FormatValue(v);
  out += '\n';
}

void AppendHistogram(std::string& out, const std::string& name, const Labels& labels,
                     const Histogram& h) {
  const std::vector<uint64_t> counts = h.cumulative_counts();
  const std::vector<double>& bounds = h.upper_bounds();
  for (size_t i = 0; i < counts.size(); ++i) {
    const std::string le = i < bounds.size() ? FormatValue(bounds[i]) : "+Inf";
    AppendSample(out, name + "_bucket", FormatLabels(labels, "le=\"" + le + "\""),
                 static_cast<double>(counts[i]));
  }
  AppendSample(out, name + "_sum", FormatLabels(labels), h.sum());
  AppendSample(out, name + "_count", FormatLabels(labels), static_cast<double>(h.count()));
}

std::vector<std::string> LabelNames(const Labels& labels) {
  std::vector<std::string> names;
  for (const auto& [name, value] : labels) {
    if (!IsValidName(name, /*allow_colon=*/false)) Die("invalid label name", name);
    names.push_back(name);
  }
  return names;
}

// Collector samples, grouped by family name at Render time.
class CollectingWriter final : public SampleWriter {
 public:
  struct Family {
    Type type;
    std::string help;
    std::vector<std::pair<Labels, double>> samples;
  };

  void Counter(std::string_view name, std::string_view help, const Labels& labels,
               double value) override {
    Add(name, help, Type::kCounter, labels, value);
  }
  void Gauge(std::string_view name, std::string_view help, const Labels& labels,
             double value) override {
    Add(name, help, Type::kGauge, labels, value);
  }
  const std::map<std::string, Family, std::less<>>& families() const { return families_; }

 private:
  void Add(std::string_view name, std::string_view help, Type type, const Labels& labels,
           double value) {
    // A collector's names may be computed, so a bad one is dropped rather than aborting a scrape.
    if (!IsValidName(name, /*allow_colon=*/true)) return;
    auto it = families_.find(name);
    if (it == families_.end()) {
      it = families_.emplace(std::string(name), Family{type, std::string(help), {}}).first;
    }
    if (it->second.type != type) return;  // first type wins: one TYPE line per family
    it->second.samples.emplace_back(labels, value);
  }
  std::map<std::string, Family, std::less<>> families_;
};

}  // namespace

void Counter::Increment(double by) {
  if (!(by >= 0)) return;  // counters only go up; negative or NaN increments are ignored
  AtomicAdd(value_, by);
}
double Counter::value() const { return value_.load(std::memory_order_relaxed); }

void Gauge::Set(double v) { value_.store(v, std::memory_order_relaxed); }
void Gauge::Add(double by) { AtomicAdd(value_, by); }
double Gauge::value() const { return value_.load(std::memory_order_relaxed); }

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)),
      counts_(new std::atomic<uint64_t>[upper_bounds_.size() + 1]) {
  for (size_t i = 0; i <= upper_bounds_.size(); ++i) counts_[i].store(0);
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    if (!std::isfinite(upper_bounds_[i])) Die("histogram bound is not finite", "");
    if (i > 0 && !(upper_bounds_[i - 1] < upper_bounds_[i])) {
      Die("histogram bounds are not strictly increasing", "");
    }
  }
}

void Histogram::Observe(double v) {
  // Bucket i counts v <= upper_bounds_[i] (Prometheus "le"); past the last bound is +Inf.
  const size_t bucket =
      std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), v) - upper_bounds_.begin();
  counts_[bucket].fetch_add(1, std::memory_order_relaxed);
  AtomicAdd(sum_, v);
  count_.fetch_add(1, std::memory_order_relaxed);
}

std::vector<uint64_t> Histogram::cumulative_counts() const {
  std::vector<uint64_t> out(upper_bounds_.size() + 1);
  uint64_t total = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    total += counts_[i].load(std::memory_order_relaxed);
    out[i] = total;
  }
  return out;
}

double Histogram::sum() const { return sum_.load(std::memory_order_relaxed); }
uint64_t Histogram::count() const { return count_.load(std::memory_order_relaxed); }

std::vector<double> LatencyBuckets() {
  return {0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
          0.1,    0.25,    0.5,    1,     2.5,    5,     10,   30,    60};
}

struct MetricsRegistry::Family {
  Type type;
  std::string help;
  std::vector<std::string> label_names;
  std::vector<double> upper_bounds;  // histograms only
  // One series per label set; only the member matching `type` is set.
  struct Series {
    std::unique_ptr<metrics::Counter> counter;
    std::unique_ptr<metrics::Gauge> gauge;
    std::unique_ptr<metrics::Histogram> histogram;
  };
  std::map<Labels, Series> series;
};

namespace {

// Finds or creates the family, checking that a reused name agrees on everything.
template <typename FamilyT>
FamilyT& FindFamily(std::map<std::string, std::unique_ptr<FamilyT>, std::less<>>& families,
                    std::string_view name, std::string_view help, Type type, const Labels& labels,
                    const std::vector<double>& upper_bounds) {
  if (!IsValidName(name, /*allow_colon=*/true)) Die("invalid metric name", name);
  std::vector<std::string> label_names = LabelNames(labels);
  if (type == Type::kHistogram &&
      std::find(label_names.begin(), label_names.end(), "le") != label_names.end()) {
    Die("histogram label 'le' is reserved", name);
  }
  auto it = families.find(name);
  if (it == families.end()) {
    auto family = std::make_unique<FamilyT>();
    family->type = type;
    family->help = std::string(help);
    family->label_names = std::move(label_names);
    family->upper_bounds = upper_bounds;
    it = families.emplace(std::string(name), std::move(family)).first;
    return *it->second;
  }
  FamilyT& family = *it->second;
  if (family.type != type) Die("metric re-registered with another type", name);
  if (family.help != help) Die("metric re-registered with another help text", name);
  if (family.label_names != label_names) Die("metric re-registered with other labels", name);
  if (family.upper_bounds != upper_bounds) Die("histogram re-registered with other buckets", name);
  return family;
}

}  // namespace

MetricsRegistry::MetricsRegistry() = default;
MetricsRegistry::~MetricsRegistry() = default;

Counter& MetricsRegistry::AddCounter(std::string_view name, std::string_view help,
                                     const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& series = FindFamily(families_, name, help, Type::kCounter, labels, {}).series[labels];
  if (series.counter == nullptr) series.counter = std::make_unique<metrics::Counter>();
  return *series.counter;
}

Gauge& MetricsRegistry::AddGauge(std::string_view name, std::string_view help,
                                 const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& series = FindFamily(families_, name, help, Type::kGauge, labels, {}).series[labels];
  if (series.gauge == nullptr) series.gauge = std::make_unique<metrics::Gauge>();
  return *series.gauge;
}

Histogram& MetricsRegistry::AddHistogram(std::string_view name, std::string_view help,
                                         std::vector<double> upper_bounds, const Labels& labels) {
  absl::MutexLock lock(&mu_);
  auto& series =
      FindFamily(families_, name, help, Type::kHistogram, labels, upper_bounds).series[labels];
  if (series.histogram == nullptr) {
    series.histogram = std::make_unique<metrics::Histogram>(std::move(upper_bounds));
  }
  return *series.histogram;
}

void MetricsRegistry::AddCollector(std::function<void(SampleWriter&)> collector) {
  absl::MutexLock lock(&mu_);
  collectors_.push_back(std::move(collector));
}

std::string MetricsRegistry::Render() const {
  std::string out;
  std::vector<std::function<void(SampleWriter&)>> collectors;
  {
    absl::MutexLock lock(&mu_);
    for (const auto& [name, family] : families_) {
      AppendHeader(out, name, family->help, family->type);
      for (const auto& [labels, series] : family->series) {
        if (series.counter) AppendSample(out, name, FormatLabels(labels), series.counter->value());
        if (series.gauge) AppendSample(out, name, FormatLabels(labels), series.gauge->value());
        if (series.histogram) AppendHistogram(out, name, labels, *series.histogram);
      }
    }
    collectors = collectors_;
  }
  // Collectors run outside the lock: they may be slow-ish or touch the registry themselves.
  CollectingWriter writer;
  for (const auto& collector : collectors) collector(writer);
  for (const auto& [name, family] : writer.families()) {
    {
      absl::MutexLock lock(&mu_);
      if (families_.count(name) > 0) continue;  // a name is one family; registered ones win
    }
    AppendHeader(out, name, family.help, family.type);
    for (const auto& [labels, value] : family.samples) {
      AppendSample(out, name, FormatLabels(labels), value);
    }
  }
  return out;
}

}  // namespace glimpse::metrics
