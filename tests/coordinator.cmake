# Coordinator, multi-process (owner: coordinator): the real glimpse-coordinator binary is
# SIGKILLed and restarted on the same RocksDB directory, or on the same etcd (a real member,
# Debian's etcd-server); leases and members are kept. Uses
# core/common/service_process.h (any service binary that logs "serving").
add_executable(glimpse_coordinator_restart_test ${CMAKE_CURRENT_LIST_DIR}/coordinator_restart_test.cc)
target_link_libraries(glimpse_coordinator_restart_test PRIVATE
  glimpse_proto glimpse_common_grpc glimpse_service_process glimpse_etcd_process GTest::gtest
  GTest::gtest_main)
add_dependencies(glimpse_coordinator_restart_test glimpse-coordinator)
target_compile_definitions(glimpse_coordinator_restart_test PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>")
gtest_discover_tests(glimpse_coordinator_restart_test
  PROPERTIES LABELS "integration" TIMEOUT 120
  DISCOVERY_TIMEOUT 60)
