# Clang's thread-safety analysis over every non-test source of this build tree
# (tools/check_thread_safety.py): GCC, which builds the project, ignores ABSL_GUARDED_BY and
# ABSL_EXCLUSIVE_LOCKS_REQUIRED; this test turns a broken lock annotation into a failure.
add_test(NAME glimpse_thread_safety_test
  COMMAND ${Python3_EXECUTABLE} ${CMAKE_SOURCE_DIR}/tools/check_thread_safety.py ${CMAKE_BINARY_DIR})
set_tests_properties(glimpse_thread_safety_test PROPERTIES TIMEOUT 1200 LABELS lint)
