# The Python client (owner: clients/python, docs/python_client.md): clients/python/tests/
# test_client.py generates the stubs (build_protos.py), starts `glimpse up` from this build tree and
# drives it through glimpse_client, the example agent loop included.
#
# Debian's python3-grpcio lives in /usr/lib/python3/dist-packages, which a python3 found earlier on
# PATH (pyenv, a venv) does not see: take the first of /usr/bin/python3 and PATH's python3 that
# imports grpc and google.protobuf, else /usr/bin/python3 (the test then says what is missing).
find_program(GLIMPSE_PATH_PYTHON3 python3)
set(GLIMPSE_CLIENT_PYTHON "")
foreach(candidate /usr/bin/python3 ${GLIMPSE_PATH_PYTHON3})
  if(GLIMPSE_CLIENT_PYTHON STREQUAL "" AND EXISTS "${candidate}")
    execute_process(COMMAND "${candidate}" -c "import grpc, google.protobuf"
      RESULT_VARIABLE import_rc OUTPUT_QUIET ERROR_QUIET)
    if(import_rc EQUAL 0)
      set(GLIMPSE_CLIENT_PYTHON "${candidate}")
    endif()
  endif()
endforeach()
if(GLIMPSE_CLIENT_PYTHON STREQUAL "")
  message(STATUS "python client test: no python3 imports grpc (apt-get install python3-grpcio)")
  set(GLIMPSE_CLIENT_PYTHON /usr/bin/python3)
endif()

set(GLIMPSE_PYTHON_CLIENT_DIR ${CMAKE_SOURCE_DIR}/clients/python)
add_test(NAME glimpse_python_client_test
  COMMAND ${GLIMPSE_CLIENT_PYTHON} ${GLIMPSE_PYTHON_CLIENT_DIR}/tests/test_client.py
    --glimpse $<TARGET_FILE:glimpse> -v)
set_tests_properties(glimpse_python_client_test PROPERTIES
  ENVIRONMENT "PYTHONPATH=${GLIMPSE_PYTHON_CLIENT_DIR};PYTHONDONTWRITEBYTECODE=1"
  LABELS "integration" TIMEOUT 240)
# The same tests against `pip install ./clients/python` in a fresh venv of PATH's python3 (PyPI's
# grpcio and protobuf, the stubs built into the wheel; needs PyPI).
find_program(GLIMPSE_VENV_PYTHON3 python3 REQUIRED)
add_test(NAME glimpse_python_client_pip_test
  COMMAND bash ${CMAKE_SOURCE_DIR}/tests/python_client_pip.sh
    ${CMAKE_BINARY_DIR}/python-client-pip $<TARGET_FILE:glimpse> ${GLIMPSE_VENV_PYTHON3})
set_tests_properties(glimpse_python_client_pip_test PROPERTIES LABELS "integration" TIMEOUT 400)
# `glimpse up` runs the service binaries of this build tree (ctest builds nothing; `make test`
# builds all first). Only what the test needs: cmake --build B --target glimpse_python_client_deps.
add_custom_target(glimpse_python_client_deps)
add_dependencies(glimpse_python_client_deps
  glimpse glimpse-coordinator glimpse-cache-node glimpse-decode-worker glimpse-prefill-worker
  glimpse-frontend)
