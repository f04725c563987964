# The whole system, multi-process (owner: decode worker / frontend): coordinator, cache node,
# decode worker, prefill worker and frontend binaries on loopback with the default model, through the Frontend API.
add_executable(glimpse_cluster_test ${CMAKE_CURRENT_LIST_DIR}/cluster_test.cc)
target_link_libraries(glimpse_cluster_test PRIVATE
  glimpse_proto glimpse_common_grpc glimpse_common glimpse_transport glimpse_service_process
  GTest::gtest GTest::gtest_main nlohmann_json::nlohmann_json)
add_dependencies(glimpse_cluster_test
  glimpse-coordinator glimpse-cache-node glimpse-decode-worker glimpse-prefill-worker
  glimpse-frontend)
target_compile_definitions(glimpse_cluster_test PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>"
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>"
  GLIMPSE_DECODE_WORKER_BINARY="$<TARGET_FILE:glimpse-decode-worker>"
  GLIMPSE_PREFILL_WORKER_BINARY="$<TARGET_FILE:glimpse-prefill-worker>"
  GLIMPSE_FRONTEND_BINARY="$<TARGET_FILE:glimpse-frontend>"
  GLIMPSE_SOURCE_DIR="${CMAKE_SOURCE_DIR}")
glimpse_discover_tests(glimpse_cluster_test LABELS integration TIMEOUT 240)
