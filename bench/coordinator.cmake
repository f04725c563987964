# Coordinator (owner: coordinator): the agent-trace simulator driving the real CoordinatorService
# (evict-at-turn-end vs fixed TTLs vs the estimator; figures from coordinator_figures.json) and
# RouteTurn/EndTurn ops/s under 32 concurrent gRPC clients. Run: `make bench-coordinator`.
add_library(glimpse_coordinator_sim STATIC ${CMAKE_CURRENT_LIST_DIR}/coordinator_sim.cc)
target_link_libraries(glimpse_coordinator_sim PUBLIC glimpse_coordinator_lib nlohmann_json::nlohmann_json)

add_executable(glimpse_bench_coordinator ${CMAKE_CURRENT_LIST_DIR}/coordinator_bench.cc)
target_link_libraries(glimpse_bench_coordinator PRIVATE glimpse_coordinator_sim glimpse_coordinator_grpc
  glimpse_coordinator_etcd glimpse_etcd_process)
target_compile_definitions(glimpse_bench_coordinator PRIVATE
  GLIMPSE_BENCH_DIR="${CMAKE_CURRENT_LIST_DIR}")

glimpse_test(glimpse_coordinator_sim_test
  SRCS ${CMAKE_CURRENT_LIST_DIR}/coordinator_sim_test.cc
  DEPS glimpse_coordinator_sim)

# Coordinator failover as a client sees it: two real coordinators on a local etcd member, the
# leader SIGKILLed or SIGTERMed, time to the next turn routed. Run: `make bench-coordinator`.
add_executable(glimpse_bench_coordinator_failover
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_failover_bench.cc)
target_link_libraries(glimpse_bench_coordinator_failover PRIVATE glimpse_proto glimpse_coordinators
  glimpse_common glimpse_common_grpc glimpse_service_process glimpse_etcd_process)
add_dependencies(glimpse_bench_coordinator_failover glimpse-coordinator)
target_compile_definitions(glimpse_bench_coordinator_failover PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>")
