# Deployment (owner: deploy/): the five service binaries start with deploy/k8s's ConfigMap configs,
# one chat turn runs, and Debian's prometheus, configured from deploy/prometheus/local.yml, scrapes
# them until a Glimpse metric of each service answers; also parses deploy/k8s and runs promtool.
# Needs the packages prometheus and python3-yaml (tools/setup/install_deps.sh); fails without them.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(GLIMPSE_PROMETHEUS_TEST
  ${Python3_EXECUTABLE} ${CMAKE_CURRENT_LIST_DIR}/prometheus_test.py
    --source ${CMAKE_SOURCE_DIR}
    --glimpse $<TARGET_FILE:glimpse>
    --coordinator $<TARGET_FILE:glimpse-coordinator>
    --cache-node $<TARGET_FILE:glimpse-cache-node>
    --decode-worker $<TARGET_FILE:glimpse-decode-worker>
    --prefill-worker $<TARGET_FILE:glimpse-prefill-worker>
    --frontend $<TARGET_FILE:glimpse-frontend>)
add_test(NAME glimpse_prometheus_test COMMAND ${GLIMPSE_PROMETHEUS_TEST})
set_tests_properties(glimpse_prometheus_test PROPERTIES LABELS "integration" TIMEOUT 180)
add_custom_target(glimpse_metrics_doc
  COMMAND ${GLIMPSE_PROMETHEUS_TEST} --write-metrics-doc
  DEPENDS glimpse glimpse-coordinator glimpse-cache-node glimpse-decode-worker
          glimpse-prefill-worker glimpse-frontend
  COMMENT "docs/metrics.md from the services' /metrics")
