// Prometheus metrics of a cache node: one collector that renders CacheNodeService::Stats() at
// scrape time (glimpse_cache_node_* counters and gauges, errors by method and status code,
// RocksDB sizes, warm-tier hits/misses/bytes, transport bytes).
#pragma once

#include "cache-node/cache_node_service.h"
#include "core/common/metrics.h"

namespace glimpse::cache_node {

// `service` is not owned and must outlive every Render of `registry`.
void RegisterMetrics(metrics::MetricsRegistry& registry, CacheNodeService* service);

}  // namespace glimpse::cache_node
