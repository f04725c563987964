# The frontend's OpenAI-compatible API (owner: frontend/openai_*, docs/openai_api.md) through the
# official `openai` package from PyPI (pinned in tests/openai_api.sh, in a venv of its own) and
# curl, against `glimpse up` from this build tree: chat and completions, streamed and not, an agent
# loop with tool calls that hits hot and then replays warm, stop strings, seeds and errors.
find_program(GLIMPSE_OPENAI_PYTHON3 python3 REQUIRED)
add_test(NAME glimpse_openai_api_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/openai_api.sh
    ${CMAKE_BINARY_DIR}/openai-api $<TARGET_FILE:glimpse> ${GLIMPSE_OPENAI_PYTHON3})
set_tests_properties(glimpse_openai_api_test PROPERTIES LABELS "integration" TIMEOUT 400)
