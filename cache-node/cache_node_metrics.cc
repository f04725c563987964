#include "cache-node/cache_node_metrics.h"

#include "absl/status/status.h"

namespace glimpse::cache_node {

void RegisterMetrics(metrics::MetricsRegistry& registry, CacheNodeService* service) {
  registry.AddCollector([service](metrics::SampleWriter& w) {
    const CacheNodeStats s = service->Stats();
    const auto counter = [&w](const char* name, const char* help, double v) {
      w.Counter(name, help, {}, v);
    };
    const auto gauge = [&w](const char* name, const char* help, double v) {
      w.Gauge(name, help, {}, v);
    };
    counter("glimpse_cache_node_puts_total", "States stored (acknowledged puts).", s.puts);
    counter("glimpse_cache_node_duplicate_puts_total",
            "Puts of an identical payload under a stored key (idempotent OK).", s.duplicate_puts);
    counter("glimpse_cache_node_gets_total", "Successful gets.", s.gets);
    counter("glimpse_cache_node_lookups_total", "Prefix lookups.", s.lookups);
    counter("glimpse_cache_node_lookup_hits_total", "Lookups that found a stored prefix.",
            s.lookup_hits);
    counter("glimpse_cache_node_deletes_total", "States deleted on request.", s.deletes);
    counter("glimpse_cache_node_put_bytes_total", "Page bytes stored by puts.", s.bytes_put);
    counter("glimpse_cache_node_get_bytes_total", "Page bytes shipped by gets.", s.bytes_got);
    counter("glimpse_cache_node_retention_deleted_total",
            "States dropped by retention (age or size).", s.retention_deleted);
    counter("glimpse_cache_node_dropped_batches_total",
            "Page batches dropped (no open ticket, failed transfer).", s.dropped_batches);
    counter("glimpse_cache_node_warm_hits_total", "Gets served from the warm tier.", s.warm.hits);
    counter("glimpse_cache_node_warm_misses_total", "Gets read from RocksDB.", s.warm.misses);
    counter("glimpse_cache_node_warm_evictions_total", "States evicted from the warm tier.",
            s.warm.evicted);
    gauge("glimpse_cache_node_warm_bytes", "Page bytes in the warm tier.", s.warm.bytes);
    gauge("glimpse_cache_node_warm_states", "States in the warm tier.", s.warm.entries);
    gauge("glimpse_cache_node_warm_budget_bytes", "warm.bytes.", s.warm_budget_bytes);
    gauge("glimpse_cache_node_states", "States stored in RocksDB.", s.states);
    gauge("glimpse_cache_node_stored_bytes", "Page bytes stored in RocksDB (manifest sums).",
          s.stored_bytes);
    gauge("glimpse_cache_node_pinned_states", "Pinned states.", s.pinned_states);
    gauge("glimpse_cache_node_pinned_bytes", "Page bytes of pinned states.", s.pinned_bytes);
    gauge("glimpse_cache_node_pending_puts", "Put tickets waiting for pages or commit.",
          s.pending_puts);
    gauge("glimpse_cache_node_rocksdb_sst_bytes", "RocksDB SST files, all column families.",
          s.storage.sst_bytes);
    gauge("glimpse_cache_node_rocksdb_wal_bytes", "RocksDB live WAL files.", s.storage.wal_bytes);
    gauge("glimpse_cache_node_rocksdb_memtable_bytes", "RocksDB memtables.",
          s.storage.memtable_bytes);
    gauge("glimpse_cache_node_rocksdb_pending_compaction_bytes",
          "RocksDB's estimate of bytes compaction still has to rewrite.",
          s.storage.pending_compaction_bytes);
    gauge("glimpse_cache_node_rocksdb_background_jobs", "RocksDB flushes and compactions running.",
          s.storage.background_jobs);
    counter("glimpse_cache_node_transport_bytes_received_total", "Transport bytes received.",
            s.transport.bytes_received);
    counter("glimpse_cache_node_transport_bytes_sent_total", "Transport bytes sent.",
            s.transport.bytes_sent);
    counter("glimpse_cache_node_transport_checksum_errors_total",
            "Transport batches with a CRC32C mismatch.", s.transport.checksum_errors);
    counter("glimpse_cache_node_transport_peers_refused_total",
            "Connects and batches refused because the peer is not registered with the coordinator.",
            s.transport.peers_refused);
    counter("glimpse_cache_node_transport_local_peers_total",
            "Endpoints opened to peers on this host over shared memory.", s.transport.local_peers);
    counter("glimpse_cache_node_transport_receives_deferred_total",
            "Page receives held back by a local sender's receive window.",
            s.transport.receive_buffers_deferred);
    gauge("glimpse_cache_node_transport_pending_batches",
          "Batches announced to this node, neither delivered nor failed yet.",
          s.transport.receive_pending_batches);
    counter("glimpse_cache_node_transport_receives_refused_total",
            "Batches refused for the receive budget and oversized batch headers.",
            s.transport.receive_refused);
    gauge("glimpse_cache_node_transport_receive_budget_bytes",
          "Bytes of announced batches not yet handed to the node (the receive budget in use).",
          s.transport.receive_pending_bytes);
    for (size_t m = 0; m < s.errors.size(); ++m) {
      for (size_t c = 0; c < s.errors[m].size(); ++c) {
        if (s.errors[m][c] == 0) continue;
        w.Counter("glimpse_cache_node_errors_total", "Failed calls by method and status code.",
                  {{"method", MethodName(static_cast<Method>(m))},
                   {"code", absl::StatusCodeToString(static_cast<absl::StatusCode>(c))}},
                  s.errors[m][c]);
      }
    }
  });
}

}  // namespace glimpse::cache_node
