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
  # Scratch files go below this build tree (gtest's TempDir() reads TEST_TMPDIR), so that two
  # checkouts testing at once on one machine never share a fixed path under /tmp.
  file(MAKE_DIRECTORY ${CMAKE_BINARY_DIR}/test-tmp)
  gtest_discover_tests(${name}
    PROPERTIES LABELS "${labels}"
               ENVIRONMENT "GLIMPSE_SOURCE_DIR=${CMAKE_SOURCE_DIR};TEST_TMPDIR=${CMAKE_BINARY_DIR}/test-tmp"
    DISCOVERY_TIMEOUT 60)
endfunction()
