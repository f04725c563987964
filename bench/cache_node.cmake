# glimpse-cache-node put/get GB/s and Lookup p50/p99 beside RocksDB's db_bench (fillrandom,
# readrandom, 64 KiB values) in the same run and directory. Run: `make bench-cache-node`.
# Owner: cache node.
add_executable(glimpse_bench_cache_node ${CMAKE_CURRENT_LIST_DIR}/cache_node_bench.cc)
target_link_libraries(glimpse_bench_cache_node
  PRIVATE glimpse_cache_client glimpse_kvstate_testing glimpse_service_process glimpse_transport
          glimpse_common nlohmann_json::nlohmann_json)
add_dependencies(glimpse_bench_cache_node glimpse-cache-node)
target_compile_definitions(glimpse_bench_cache_node PRIVATE
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>"
  GLIMPSE_BENCH_DIR="${CMAKE_BINARY_DIR}/bench-cache-node"
  GLIMPSE_BENCH_JSON="${CMAKE_BINARY_DIR}/cache_node_bench.json")

# Replicated cache nodes: put/get GB/s and latency with 1, 2 and 3 nodes, R = 1 and 2, on this
# host; repair; a node's death and a node's joining with membership on etcd. Run: `make bench-cache-node` (its second half).
add_executable(glimpse_bench_cache_replication ${CMAKE_CURRENT_LIST_DIR}/cache_replication_bench.cc)
target_link_libraries(glimpse_bench_cache_replication
  PRIVATE glimpse_cache_client glimpse_etcd_membership glimpse_etcd_process
          glimpse_kvstate_testing glimpse_service_process glimpse_transport glimpse_common)
add_dependencies(glimpse_bench_cache_replication glimpse-cache-node)
target_compile_definitions(glimpse_bench_cache_replication PRIVATE
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>")
