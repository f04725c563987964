# Eviction overhead (owner: eviction; issue 21): each method's prefill against a plain prefill in
# the same process, at 1K-4K prompt tokens. Run: `make bench-overhead`.
add_executable(glimpse_bench_overhead ${CMAKE_CURRENT_LIST_DIR}/overhead_bench.cc)
target_link_libraries(glimpse_bench_overhead
  PRIVATE glimpse_worker glimpse_eviction glimpse_model glimpse_common absl::status absl::statusor
          absl::strings absl::str_format nlohmann_json::nlohmann_json)
target_compile_definitions(glimpse_bench_overhead PRIVATE
  GLIMPSE_LOOKAHEAD_MODULE="${CMAKE_SOURCE_DIR}/models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors"
  GLIMPSE_PROMPT_FILE="${CMAKE_CURRENT_LIST_DIR}/prompt.txt"
  GLIMPSE_BENCH_JSON="${CMAKE_BINARY_DIR}/overhead_bench.json")
