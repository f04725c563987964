# Glimpse: the two commands are `make run` and `make test`; each installs what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PYTHON ?= python3
GLIMPSE := $(BUILD_DIR)/tools/cli/glimpse

.PHONY: all deps model build test run bench fuzz clean

all: build

deps:
	@bash tools/setup/install_deps.sh

model: deps
	@$(PYTHON) tools/setup/fetch_model.py >/dev/null

build: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS)

test: build model
	@cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

# A short multi-turn chat with the default model (the services join this target as they land).
run: build model
	@printf 'What is the capital of France?\nWrite one sentence about it.\n' | \
	  $(GLIMPSE) generate --chat --max-tokens 48

bench: build model
	@$(BUILD_DIR)/bench/glimpse_bench_model

clean:
	rm -rf $(BUILD_DIR)
