# Capacity (owner: workers; issue 22): sessions of a ~2K-token conversation one KV pool keeps hot,
# per eviction policy and codec, and the RSS the pools add. Run: `make bench-capacity`.
add_executable(glimpse_bench_capacity ${CMAKE_CURRENT_LIST_DIR}/capacity_bench.cc)
target_link_libraries(glimpse_bench_capacity
  PRIVATE glimpse_worker glimpse_eviction glimpse_model glimpse_common absl::status absl::statusor
          absl::strings nlohmann_json::nlohmann_json)
target_compile_definitions(glimpse_bench_capacity PRIVATE
  GLIMPSE_LOOKAHEAD_MODULE="${CMAKE_SOURCE_DIR}/models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors"
  GLIMPSE_PROMPT_FILE="${CMAKE_CURRENT_LIST_DIR}/prompt.txt"
  GLIMPSE_BENCH_JSON="${CMAKE_BINARY_DIR}/capacity_bench.json")
