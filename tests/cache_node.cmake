# Cache node, multi-process (owner: cache node). The real glimpse-cache-node binary over real UCX
# (shm + tcp on loopback): SIGKILL mid-stream and restart, then a RocksDB directory on a full
# tmpfs. main() is the UCX tests' (routes UCX's log to stderr).
add_executable(glimpse_cache_node_crash_test
  ${CMAKE_CURRENT_LIST_DIR}/cache_node_crash_test.cc
  ${CMAKE_SOURCE_DIR}/core/transport/ucx_test_main.cc)
target_link_libraries(glimpse_cache_node_crash_test PRIVATE
  glimpse_cache_node_lib glimpse_cache_client glimpse_kvstate_testing glimpse_service_process
  glimpse_transport GTest::gtest)
add_dependencies(glimpse_cache_node_crash_test glimpse-cache-node)
target_compile_definitions(glimpse_cache_node_crash_test PRIVATE
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>")
glimpse_discover_tests(glimpse_cache_node_crash_test LABELS integration TIMEOUT 120)

# Replicated cache nodes (core/cache_client/cache_client.h): three real nodes, R = 2; a node's
# SIGKILL loses no acknowledged state and stops no store; with membership on a real etcd, nodes
# join and leave by themselves.
add_executable(glimpse_cache_replication_test
  ${CMAKE_CURRENT_LIST_DIR}/cache_replication_test.cc
  ${CMAKE_SOURCE_DIR}/core/transport/ucx_test_main.cc)
target_link_libraries(glimpse_cache_replication_test PRIVATE
  glimpse_cache_client glimpse_etcd_membership glimpse_etcd_process glimpse_kvstate_testing
  glimpse_service_process glimpse_transport GTest::gtest)
add_dependencies(glimpse_cache_replication_test glimpse-cache-node)
target_compile_definitions(glimpse_cache_replication_test PRIVATE
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>")
glimpse_discover_tests(glimpse_cache_replication_test LABELS integration TIMEOUT 180)
