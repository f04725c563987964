# UcxTransport throughput between two processes (shm, tcp, shm+tcp on loopback) beside ucx_perftest
# tag_bw with the same UCX_TLS, error handling and sizes; prints a table and writes transport_bench.json in the
# build dir. Run: `make bench-transport`. Owner: transport.
find_program(GLIMPSE_UCX_PERFTEST ucx_perftest)
if(NOT GLIMPSE_UCX_PERFTEST)
  set(GLIMPSE_UCX_PERFTEST ucx_perftest)  # looked up at run time; override with --perftest=PATH
endif()
add_executable(glimpse_bench_transport ${CMAKE_CURRENT_LIST_DIR}/transport_bench.cc)
target_link_libraries(glimpse_bench_transport
  PRIVATE glimpse_transport glimpse_transport_testing glimpse_common glimpse_service_process
          absl::status absl::statusor
          absl::strings absl::str_format absl::time nlohmann_json::nlohmann_json)
add_dependencies(glimpse_bench_transport glimpse_transport_peer)
target_compile_definitions(glimpse_bench_transport PRIVATE
  GLIMPSE_TRANSPORT_PEER="$<TARGET_FILE:glimpse_transport_peer>"
  GLIMPSE_UCX_PERFTEST="${GLIMPSE_UCX_PERFTEST}"
  GLIMPSE_BENCH_JSON="${CMAKE_BINARY_DIR}/transport_bench.json")
