# docs/configuration.md is generated from the services' declared keys (tools/gen_config_doc.py):
# the test fails with a diff when a key changed and the doc was not regenerated; the target
# glimpse_config_doc regenerates it.
find_package(Python3 REQUIRED COMPONENTS Interpreter)
set(GLIMPSE_CONFIG_DOC_ARGS
  --cache-node $<TARGET_FILE:glimpse-cache-node>
  --coordinator $<TARGET_FILE:glimpse-coordinator>
  --decode-worker $<TARGET_FILE:glimpse-decode-worker>
  --prefill-worker $<TARGET_FILE:glimpse-prefill-worker>
  --frontend $<TARGET_FILE:glimpse-frontend>)
add_test(NAME glimpse_config_doc_test
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/gen_config_doc.py
    ${GLIMPSE_CONFIG_DOC_ARGS} --check)
set_tests_properties(glimpse_config_doc_test PROPERTIES TIMEOUT 120)
add_custom_target(glimpse_config_doc
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/gen_config_doc.py
    ${GLIMPSE_CONFIG_DOC_ARGS}
  DEPENDS glimpse-cache-node glimpse-coordinator glimpse-decode-worker glimpse-prefill-worker
          glimpse-frontend
  COMMENT "docs/configuration.md from the services' --help")
