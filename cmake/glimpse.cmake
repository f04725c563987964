# Helpers shared by every folder: one library target per folder, one test binary per _test.cc.

# glimpse_library(NAME SRCS a.cc b.cc DEPS x y)
function(glimpse_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(${name} STATIC ${ARG_SRCS})
  target_link_libraries(${name} PUBLIC ${ARG_DEPS})
endfunction()

# glimpse_test(NAME SRCS a_test.cc DEPS lib) — discovered by ctest, labelled "unit".
function(glimpse_test name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  set(labels unit)
  if(ARG_LABELS)
    set(labels ${ARG_LABELS})
  endif()
  glimpse_discover_tests(${name} LABELS ${labels})
endfunction()

# glimpse_discover_tests(NAME LABELS l [TIMEOUT s]) — a gtest binary's tests, one ctest test each.
# Each test process writes its scratch files in a directory of its own below this build tree,
# removed when it ends (core/common/test_scratch.cc): two checkouts testing at once on one machine
# never share a path, and no run leaves its files behind.
function(glimpse_discover_tests name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "LABELS" ${ARGN})
  target_link_libraries(${name} PRIVATE glimpse_test_scratch)
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/test-tmp)
  # Two properties: gtest_discover_tests keeps only the first of two variables in ENVIRONMENT.
  set(properties LABELS "${ARG_LABELS}" ENVIRONMENT "GLIMPSE_SOURCE_DIR=${CMAKE_SOURCE_DIR}"
      ENVIRONMENT_MODIFICATION "TEST_TMPDIR=set:${CMAKE_BINARY_DIR}/test-tmp")
  if(ARG_TIMEOUT)
    list(APPEND properties TIMEOUT ${ARG_TIMEOUT})
  endif()
  gtest_discover_tests(${name} PROPERTIES ${properties} DISCOVERY_TIMEOUT 60)
endfunction()
