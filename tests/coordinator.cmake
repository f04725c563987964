# Coordinator, multi-process (owner: coordinator): the real glimpse-coordinator binary is
# SIGKILLed and restarted on the same RocksDB directory, or on the same etcd (a real member,
# Debian's etcd-server; the restarted one waits out the dead one's election lease); leases and
# members are kept. Uses
# core/common/service_process.h (any service binary that logs "serving").
add_executable(glimpse_coordinator_restart_test ${CMAKE_CURRENT_LIST_DIR}/coordinator_restart_test.cc)
target_link_libraries(glimpse_coordinator_restart_test PRIVATE
  glimpse_proto glimpse_common_grpc glimpse_service_process glimpse_etcd_process GTest::gtest
  GTest::gtest_main)
add_dependencies(glimpse_coordinator_restart_test glimpse-coordinator)
target_compile_definitions(glimpse_coordinator_restart_test PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>")
glimpse_discover_tests(glimpse_coordinator_restart_test LABELS integration TIMEOUT 120)

# Two coordinators elected on one etcd member: the follower names the leader, takes over when the
# leader is SIGKILLed or cut off from etcd (a TcpProxy), and no lease is granted by two leaders.
add_executable(glimpse_coordinator_failover_test
  ${CMAKE_CURRENT_LIST_DIR}/coordinator_failover_test.cc)
target_link_libraries(glimpse_coordinator_failover_test PRIVATE
  glimpse_proto glimpse_coordinators glimpse_common_grpc glimpse_service_process glimpse_tcp_proxy
  glimpse_netns glimpse_etcd_process glimpse_etcd_membership GTest::gmock GTest::gtest)
add_dependencies(glimpse_coordinator_failover_test glimpse-coordinator)
target_compile_definitions(glimpse_coordinator_failover_test PRIVATE
  GLIMPSE_COORDINATOR_BINARY="$<TARGET_FILE:glimpse-coordinator>")
glimpse_discover_tests(glimpse_coordinator_failover_test LABELS integration TIMEOUT 180)
