# KV page codec micro-benchmark (Google Benchmark): encode/decode GB/s per codec and the ratio to
# memcpy of the same bytes in the same run. Owner: kvpage.
add_executable(glimpse_bench_kvpage ${CMAKE_CURRENT_LIST_DIR}/kvpage_bench.cc)
target_link_libraries(glimpse_bench_kvpage PRIVATE glimpse_kvpage benchmark::benchmark)
