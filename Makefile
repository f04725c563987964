# Glimpse: the two commands are `make run` and `make test`; each installs what is missing first.
BUILD_DIR ?= build
JOBS ?= $(shell nproc)
CMAKE_FLAGS ?=
PYTHON ?= python3
GLIMPSE := $(BUILD_DIR)/tools/cli/glimpse

.PHONY: all deps model build build-run test run bench fuzz soak soak-cluster clean

all: build

deps:
	@bash tools/setup/install_deps.sh

model: deps
	@$(PYTHON) tools/setup/fetch_model.py >/dev/null

build: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS)

# What `make run` needs and no more: the CLI and the five services (the tests stay in `make test`).
RUN_TARGETS := glimpse glimpse-coordinator glimpse-cache-node glimpse-decode-worker \
	glimpse-prefill-worker glimpse-frontend
build-run: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@echo "building the CLI and the five services ($(JOBS) jobs; cmake prints [percent] progress)"
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target $(RUN_TARGETS)

# The whole suite: a short libFuzzer run on the GGUF and page parsers, then unit, golden and CLI tests.
test: build model
	@$(MAKE) --no-print-directory fuzz FUZZ_SECONDS=20
	@cd $(BUILD_DIR) && ctest --output-on-failure -j$(JOBS)

# The local cluster (coordinator, cache node, decode worker, frontend as separate processes on
# loopback) and a 3-turn agent session through it: LookaheadKV eviction to 20 %, int8 pages, a
# fixed 2 s lease so that the demo shows every tier: turn 1 (37 new tokens, over the 30-token
# prefill threshold) prefills on the prefill worker, which ships the kept KV to the decode worker;
# the first tool call is shorter than the lease (turn 2 is a hot hit), the second longer (turn 3
# reloads from the cache node; on the prefill worker, because the coordinator counts a turn's new
# tokens against the session's kept KV, which eviction shrank). Per turn: TTFT, tokens/s, hot KV vs full fp16, tier, bytes shipped.
RUN_DIR ?= $(BUILD_DIR)/run-cluster
run: build-run model
	@rm -rf $(RUN_DIR)
	@printf '%s\n' \
	  'What is the capital of France?' '/tool web_search 1' \
	  'Write one sentence about its most famous museum.' '/tool read_file 3' \
	  'We travel there in spring. Suggest one thing to pack.' | \
	  $(GLIMPSE) up --chat --dir $(RUN_DIR) --policy lookahead --budget 0.2 --codec int8 \
	    --max-tokens 48 --lease-ttl 2s --prefill-threshold 30

# Our runtime against llama.cpp (built once into the oracle venv, no torch): tok/s, RSS, ratios.
bench: build model
	@BUILD_DIR=$(BUILD_DIR) bash bench/run_model_bench.sh $(BENCH_ARGS)

# libFuzzer over the GGUF parser and the KV page decoder, FUZZ_SECONDS split between them, in its
# own clang + ASan build tree. Seeds: tests/fixtures/fuzz/*.gguf.bin and *.page.bin; new inputs go
# to build-fuzz/corpus/<name>, logs to build-fuzz/fuzz-<name>.log. CUDA is left out of this build.
FUZZ_DIR ?= build-fuzz
FUZZ_SECONDS ?= 30
FUZZ_GGUF_SECONDS = $(shell echo $$(( ($(FUZZ_SECONDS) + 1) / 2 )))
FUZZ_PAGE_SECONDS = $(shell echo $$(( $(FUZZ_SECONDS) / 2 )))

# $(call run_fuzzer,NAME,BINARY,SECONDS): seeds from tests/fixtures/fuzz/*.NAME.bin.
define run_fuzzer
	@mkdir -p $(FUZZ_DIR)/corpus/$(1) $(FUZZ_DIR)/seeds/$(1)
	@cp tests/fixtures/fuzz/*.$(1).bin $(FUZZ_DIR)/seeds/$(1)/
	@echo "fuzz: $(notdir $(2)) for $(3)s (log: $(FUZZ_DIR)/fuzz-$(1).log)"
	@$(FUZZ_DIR)/$(2) -max_total_time=$(3) -rss_limit_mb=2048 \
	  $(FUZZ_DIR)/corpus/$(1) $(FUZZ_DIR)/seeds/$(1) > $(FUZZ_DIR)/fuzz-$(1).log 2>&1 \
	  || { tail -n 60 $(FUZZ_DIR)/fuzz-$(1).log; exit 1; }
	@grep -E '^Done [0-9]+ runs' $(FUZZ_DIR)/fuzz-$(1).log | sed 's/^/fuzz: $(1): /'
endef

# ThreadSanitizer, then AddressSanitizer with UBSan, over the concurrency-heavy suites (engine,
# decode worker turns, cache node, coordinator), SOAK_REPEAT shuffled runs each, in clang trees of
# their own (build-soak-thread/, build-soak-address/). Not part of `make test`: the two builds and
# runs take about half an hour on 2 cores.
SOAK_REPEAT ?= 3
soak: deps model
	@bash tools/sanitizers/soak.sh thread build-soak-thread $(SOAK_REPEAT) $(JOBS)
	@bash tools/sanitizers/soak.sh address build-soak-address $(SOAK_REPEAT) $(JOBS)

# The five services built with a sanitizer (SOAK_SANITIZER: address, with UBSan, or thread) serve
# mixed traffic for SOAK_MINUTES while a random member is SIGKILLed and restarted every 30 s; the
# report (requests served, errors by code, acknowledged states lost, peak memory) is
# build-soak-<sanitizer>/cluster-soak.json. Not part of `make test`.
SOAK_MINUTES ?= 30
SOAK_SANITIZER ?= address
soak-cluster: deps model
	@bash tools/sanitizers/cluster_soak.sh $(SOAK_SANITIZER) build-soak-$(SOAK_SANITIZER) $(SOAK_MINUTES) $(JOBS)

fuzz: deps
	@CC=clang CXX=clang++ cmake -S . -B $(FUZZ_DIR) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DGLIMPSE_FUZZ=ON -DGLIMPSE_NATIVE=ON -DCMAKE_CUDA_COMPILER= >/dev/null
	@cmake --build $(FUZZ_DIR) -j$(JOBS) --target glimpse_gguf_fuzzer glimpse_page_fuzzer
	$(call run_fuzzer,gguf,core/model/glimpse_gguf_fuzzer,$(FUZZ_GGUF_SECONDS))
	$(call run_fuzzer,page,core/kvpage/glimpse_page_fuzzer,$(FUZZ_PAGE_SECONDS))

clean:
	rm -rf $(BUILD_DIR)

# Trains the LookaheadKV module for the default model from scratch (docs/eviction_quality.md
# "LookaheadKV module"): the oracle venv with torch, training data made on this machine, then the
# trainer (resumable).
# About 20 minutes on 2 CPU cores. FINGERPRINT is the default model's Model::fingerprint().
LOOKAHEAD_MODULE ?= models/lookahead/SmolLM2-135M-Instruct.Q4_1.safetensors
FINGERPRINT ?= 17f1ae519c28bd6a26fafb69beb2478e
.PHONY: train-lookahead
train-lookahead: build model
	@VENV=$$(bash tools/oracle/setup_venv.sh --with-torch) && \
	  $$VENV/bin/python tools/lookahead/make_data.py --glimpse $(GLIMPSE) && \
	  $$VENV/bin/python tools/lookahead/train.py --base-fingerprint $(FINGERPRINT) \
	    --out $(LOOKAHEAD_MODULE) && \
	  $$VENV/bin/python tools/lookahead/make_scores_fixture.py --glimpse $(GLIMPSE) \
	    --module $(LOOKAHEAD_MODULE)

# The learned gates (kvzip_gate, trimkv_gate, retention_global) on LookaheadKV's data, written
# beside its module, then the fixture of their scores in PyTorch for tests/gate_artifact_test.cc.
.PHONY: train-gates
train-gates: build model
	@VENV=$$(bash tools/oracle/setup_venv.sh --with-torch) && \
	  $$VENV/bin/python tools/lookahead/make_data.py --glimpse $(GLIMPSE) && \
	  for gate in kvzip_gate trimkv_gate retention_global; do \
	    $$VENV/bin/python tools/gates/train.py --method $$gate \
	      --base-fingerprint $(FINGERPRINT) || exit 1; \
	  done && \
	  $$VENV/bin/python tools/gates/make_fixture.py --glimpse $(GLIMPSE)

# ForesightKV (tools/foresight/): long generations over LookaheadKV's training texts, its scorer
# trained on them and written beside the module, then the fixture of every learned scorer's
# PyTorch scores for tests/gate_artifact_test.cc. About 15 minutes on 2 CPU cores.
.PHONY: train-foresight
train-foresight: build model
	@VENV=$$(bash tools/oracle/setup_venv.sh --with-torch) && \
	  $$VENV/bin/python tools/lookahead/make_data.py --glimpse $(GLIMPSE) && \
	  $$VENV/bin/python tools/foresight/make_data.py --glimpse $(GLIMPSE) && \
	  $$VENV/bin/python tools/foresight/train.py --base-fingerprint $(FINGERPRINT) && \
	  $$VENV/bin/python tools/gates/make_fixture.py --glimpse $(GLIMPSE)

# UcxTransport vs ucx_perftest (tag_bw), shm, tcp and shm+tcp on 127.0.0.1, 64 KiB .. 4 MiB pages: a table
# on stdout and $(BUILD_DIR)/transport_bench.json. Builds only its own targets.
.PHONY: bench-transport
bench-transport: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_transport glimpse_transport_peer
	@$(BUILD_DIR)/bench/glimpse_bench_transport

# glimpse-cache-node put/get GB/s and Lookup p50/p99 against RocksDB's db_bench (fillrandom,
# readrandom, 64 KiB values) in the same run and directory; docs/benchmarks.md "Cache node",
# figures in bench/RESULTS.md. Builds only its own targets; BENCH_ARGS passes flags
# (e.g. BENCH_ARGS=--put_mib=1024).
.PHONY: bench-cache-node
bench-cache-node: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_cache_node glimpse-cache-node \
		glimpse_bench_cache_replication
	@$(BUILD_DIR)/bench/glimpse_bench_cache_node $(BENCH_ARGS)
	@$(BUILD_DIR)/bench/glimpse_bench_cache_replication

# Coordinator: the agent-trace simulator (evict at turn end vs fixed TTLs vs the lease estimator,
# service times from bench/coordinator_figures.json) and RouteTurn/EndTurn ops/s and p99 under 32
# concurrent gRPC clients; about 40 s. BENCH_ARGS passes flags (e.g. BENCH_ARGS=--quick). Builds
# only its own targets.
.PHONY: bench-coordinator
bench-coordinator: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_coordinator \
		glimpse_bench_coordinator_failover
	@GLIMPSE_LOG_LEVEL=warning $(BUILD_DIR)/bench/glimpse_bench_coordinator $(BENCH_ARGS)
	@GLIMPSE_LOG_LEVEL=warning $(BUILD_DIR)/bench/glimpse_bench_coordinator_failover

# Sessions of a ~2K-token conversation a 256 MiB KV pool keeps hot per policy and codec, and the
# RSS the pools add; a table on stdout and $(BUILD_DIR)/capacity_bench.json; about 1 min.
.PHONY: bench-capacity
bench-capacity: deps model
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_capacity
	@$(BUILD_DIR)/bench/glimpse_bench_capacity $(BENCH_ARGS)

# What each eviction method adds to a prefill worker's prefill (scoring, selection, compaction;
# LookaheadKV's rows) against a plain prefill in the same process, at 1K, 2K and 4K prompt tokens;
# a table on stdout and $(BUILD_DIR)/overhead_bench.json; about 8 min.
.PHONY: bench-overhead
bench-overhead: deps model
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_overhead
	@$(BUILD_DIR)/bench/glimpse_bench_overhead $(BENCH_ARGS)

# Concurrent multi-turn sessions through the cluster against llama.cpp's own server at the same N
# (llama-server --parallel N --cont-batching, built once from the oracle venv's llama.cpp, ~10 min
# the first time); tables and ratios on stdout, $(BUILD_DIR)/load_anchor.json; about 2 min a round
# (BENCH_ARGS="--rounds 3" for medians).
.PHONY: bench-load
bench-load: deps model
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_cluster
	@BUILD_DIR=$(BUILD_DIR) bash bench/run_load_anchor.sh $(BENCH_ARGS)

# The four services through the Frontend API: TTFT by source (recompute / hot / warm) at a
# ~2K-token history, bytes per turn against full fp16 KV, 8 concurrent sessions against 1; a table
# on stdout and $(BUILD_DIR)/cluster_bench.json; about 3 min (BENCH_ARGS=--quick: CI size). Builds
# only its own targets.
.PHONY: bench-cluster
bench-cluster: deps
	@cmake -S . -B $(BUILD_DIR) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j$(JOBS) --target glimpse_bench_cluster
	@$(BUILD_DIR)/bench/glimpse_bench_cluster $(BENCH_ARGS)
