# The whole system under load (owner: decode worker / frontend; docs/benchmarks.md "Cluster
# benchmark", figures in bench/RESULTS.md): TTFT by source (recompute / hot / warm) at a
# ~2K-token history, bytes per turn against full fp16 KV, and
# throughput of concurrent sessions on one decode worker, through the Frontend API of the five
# service binaries. Run: `make bench-cluster` (BENCH_ARGS=--quick for the CI-size run).
add_executable(glimpse_bench_cluster ${CMAKE_CURRENT_LIST_DIR}/cluster_bench.cc)
target_link_libraries(glimpse_bench_cluster
  PRIVATE glimpse_model glimpse_proto glimpse_common_grpc glimpse_service_process glimpse_common
          absl::status absl::statusor absl::strings absl::str_format nlohmann_json::nlohmann_json)
add_dependencies(glimpse_bench_cluster
  glimpse-coordinator glimpse-cache-node glimpse-decode-worker glimpse-prefill-worker
  glimpse-frontend)
target_compile_definitions(glimpse_bench_cluster PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>"
  GLIMPSE_CACHE_NODE_BINARY="$<TARGET_FILE:glimpse-cache-node>"
  GLIMPSE_DECODE_WORKER_BINARY="$<TARGET_FILE:glimpse-decode-worker>"
  GLIMPSE_PREFILL_WORKER_BINARY="$<TARGET_FILE:glimpse-prefill-worker>"
  GLIMPSE_FRONTEND_BINARY="$<TARGET_FILE:glimpse-frontend>"
  GLIMPSE_LOOKAHEAD_MODULE="${CMAKE_SOURCE_DIR}/models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors"
  GLIMPSE_BENCH_DIR="${CMAKE_BINARY_DIR}/bench-cluster"
  GLIMPSE_BENCH_JSON="${CMAKE_BINARY_DIR}/cluster_bench.json")
