# Meridian's user interface. On a fresh Debian 12 machine:
#   make demo   installs what the demo needs, builds, runs the A/B replay
#   make test   installs everything, builds, runs every test (timed per stage)
#   make check  the contributor's inner loop: build, ctest, pytest without real engines, format
# Other targets: setup, build, bench, engine-replay, engine-replay-fidelity, soak, fuzz, docs-check, format, lint, clean.

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
JOBS ?= $(shell nproc)
VENV := .venv
PYTHON := $(VENV)/bin/python
CMAKE_FLAGS ?=

SOURCES := $(shell git ls-files '*.cpp' '*.h' '*.cu' 2>/dev/null || find include src apps tests benchmarks bindings -name '*.cpp' -o -name '*.h')
TIDY_SOURCES := $(shell git ls-files 'src/*.cpp' 'apps/*.cpp' 'kernels/*.cpp' 2>/dev/null)

.PHONY: all setup build test check test-cpp test-study test-sanitizers test-asan test-tsan test-python test-package test-install \
	test-vllm-compat lint format format-check bench demo engine-replay engine-replay-fidelity clean

all: build

setup:
	@scripts/setup.sh

# $(BUILD_DIR)'s configuration. The wheel that test-package builds uses the same tree and
# the same settings, so the Python extension and the libraries it links are compiled once.
MAIN_DEFINES := MERIDIAN_BUILD_TESTS=ON MERIDIAN_BUILD_BENCH=ON MERIDIAN_BUILD_APPS=ON MERIDIAN_BUILD_TELEMETRY=ON \
	MERIDIAN_BUILD_PYTHON=ON

# make test's lanes run side by side and several need this tree: two cmake runs at once in one
# tree break it (ninja: "failed recompaction"), so configuring and building hold
# $(BUILD_DIR)/.build.lock, as scripts/test_package.sh does (docs/testing.md#one-build-at-a-time).
build: setup
	@mkdir -p $(BUILD_DIR) && exec 9>$(BUILD_DIR)/.build.lock && flock 9 && \
	  cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(addprefix -D,$(MAIN_DEFINES)) \
	    -DPython_EXECUTABLE=$(abspath $(PYTHON)) $(CMAKE_FLAGS) >/dev/null && \
	  cmake --build $(BUILD_DIR) -j $(JOBS)
	@echo "built $(BUILD_DIR)/bin/meridian"

# Everything CI checks, fastest failures first, each stage timed (scripts/make_test.sh).
test:
	@BUILD_DIR=$(BUILD_DIR) MAKE="$(MAKE)" scripts/make_test.sh

# The inner loop (CONTRIBUTING.md#build-and-test): the main build, ctest, pytest without the
# suites that start a real vLLM engine or server, and the formatting check.
check: build format-check test-cpp test-package
	@MERIDIAN_BIN=$(abspath $(BUILD_DIR))/bin/meridian $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) -m "not e2e" tests/python

test-cpp:
	@cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -LE study

# The ruler's study tests (label `study`): whole goodput searches at each workload's window,
# minutes each, so `make test` runs them in a lane beside pytest rather than before it.
test-study:
	@cd $(BUILD_DIR) && ctest --output-on-failure --no-tests=error -j $(JOBS) -L study

# ASan+UBSan over every C++ suite but the `study` label (whole goodput searches at full windows,
# far too slow in a Debug sanitizer build; replay_test covers their code there); TSan over the
# concurrent suites.
test-sanitizers: test-asan test-tsan

test-asan: setup
	@cmake -S . -B $(BUILD_DIR)-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DMERIDIAN_SANITIZE=address,undefined \
	  -DMERIDIAN_ENABLE_CUDA=OFF -DMERIDIAN_BUILD_BENCH=OFF -DMERIDIAN_BUILD_APPS=OFF >/dev/null
	@cmake --build $(BUILD_DIR)-asan -j $(JOBS)
	@cd $(BUILD_DIR)-asan && ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1 \
	  ctest --output-on-failure --no-tests=error -j $(JOBS) -LE study

TSAN_TESTS := router_concurrency_test request_id_map_test row_stats_test engine_concurrency_test telemetry_registry_test
test-tsan: setup
	@cmake -S . -B $(BUILD_DIR)-tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DMERIDIAN_SANITIZE=thread \
	  -DMERIDIAN_ENABLE_CUDA=OFF -DMERIDIAN_BUILD_BENCH=OFF -DMERIDIAN_BUILD_APPS=OFF >/dev/null
	@cmake --build $(BUILD_DIR)-tsan -j $(JOBS) --target $(TSAN_TESTS)
	@cd $(BUILD_DIR)-tsan && TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1 \
	  ctest --output-on-failure --no-tests=error -L 'concurrency|kernels' -j $(JOBS)

# libFuzzer harnesses (fuzz/, docs/testing.md#fuzzing) in their own clang build: `make fuzz`
# runs each for FUZZ_SECONDS over its corpus (new finds go to $(BUILD_DIR)-fuzz/fuzz-out;
# FUZZ_MERGE=1 merges them into fuzz/corpus), `make fuzz-smoke` replays every corpus and past
# finding and fuzzes each harness for FUZZ_SMOKE_SECONDS. Any crash fails the target.
FUZZ_SECONDS ?= 60
FUZZ_SMOKE_SECONDS ?= 10
.PHONY: fuzz fuzz-smoke fuzz-build
fuzz-build: setup
	@cmake -S . -B $(BUILD_DIR)-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=clang \
	  -DCMAKE_CXX_COMPILER=clang++ -DMERIDIAN_BUILD_FUZZ=ON -DMERIDIAN_ENABLE_CUDA=OFF -DMERIDIAN_BUILD_TESTS=OFF \
	  -DMERIDIAN_BUILD_BENCH=OFF -DMERIDIAN_BUILD_APPS=OFF >/dev/null
	@cmake --build $(BUILD_DIR)-fuzz -j $(JOBS) --target meridian_fuzzers

fuzz: fuzz-build
	@scripts/fuzz.sh --seconds $(FUZZ_SECONDS) $(if $(FUZZ_MERGE),--merge) $(BUILD_DIR)-fuzz/bin

fuzz-smoke: fuzz-build
	@scripts/fuzz.sh --seconds $(FUZZ_SMOKE_SECONDS) --jobs $(JOBS) $(BUILD_DIR)-fuzz/bin

# The Python package, installed as a user would (pip install), then pytest against the
# installed copy, one worker per core (pytest-xdist; a module goes whole to one worker, so its
# engine or server fixture starts once); the CLI tests use $(BUILD_DIR)/bin/meridian.
PYTEST_PARALLEL := -n $(JOBS) --dist loadscope --no-loadscope-reorder
PYTEST_FILES ?= tests/python
test-python: test-package
	@MERIDIAN_BIN=$(abspath $(BUILD_DIR))/bin/meridian $(PYTHON) -m pytest -q $(PYTEST_PARALLEL) $(PYTEST_FILES)

# The vLLM integration's scheduler- and processor-level tests against vLLM 0.33.0, in its
# own environment (.venv-vllm-0.33; the official wheel has no CPU kernels, so no generation),
# with the wheel test-package built.
test-vllm-compat: test-package
	@scripts/vllm-compat.sh --wheel "$$(echo $(WHEEL_DIR)/meridian-*.whl)" "-mnot e2e" tests/python/test_vllm_scheduler.py tests/python/test_vllm_async.py tests/python/test_vllm_admission.py tests/python/test_vllm_ttft_triage.py \
	  tests/python/test_vllm_logits_processor.py tests/python/test_vllm_lp_harm.py tests/python/test_vllm_extra_args.py \
	  tests/python/test_vllm_think_eviction.py tests/python/test_vllm_token_times.py

# Every shell command shown in README.md and docs/ runs (blocks marked
# <!-- docs-check: skip (reason) --> are skipped with the reason), and
# docs/configuration.md matches the schema (CONTRIBUTING.md#docs-that-cannot-drift).
.PHONY: docs-check
docs-check: test-package
	@BUILD_DIR=$(BUILD_DIR) $(PYTHON) scripts/docs_check.py --build-dir $(BUILD_DIR) --jobs $(JOBS)

# The wheel, built in $(BUILD_DIR) with its settings (nothing compiled twice) and installed into
# .venv; skipped while its inputs are unchanged (scripts/test_package.sh).
WHEEL_DIR := $(BUILD_DIR)/wheel
test-package: build
	@scripts/test_package.sh $(BUILD_DIR) $(BUILD_TYPE) $(MAIN_DEFINES) -- $(CMAKE_FLAGS)

# The exported CMake package works for a downstream project.
test-install:
	@rm -rf $(BUILD_DIR)/install-test $(BUILD_DIR)/consumer
	@flock $(BUILD_DIR)/.build.lock cmake --install $(BUILD_DIR) --prefix $(BUILD_DIR)/install-test >/dev/null
	@cmake -S tests/cmake_consumer -B $(BUILD_DIR)/consumer -G Ninja \
	  -DCMAKE_PREFIX_PATH=$(abspath $(BUILD_DIR))/install-test >/dev/null
	@cmake --build $(BUILD_DIR)/consumer >/dev/null
	@$(BUILD_DIR)/consumer/consumer

format:
	@clang-format -i $(SOURCES)

format-check:
	@clang-format --dry-run -Werror $(SOURCES)

# clang-tidy over every translation unit whose inputs changed since it was last found clean
# (scripts/tidy_cached.py: a change to a header re-checks every unit that includes it).
lint: build
	@python3 scripts/tidy_cached.py -p $(BUILD_DIR) -j $(JOBS) --extra-arg=-Wthread-safety $(TIDY_SOURCES)

# A million requests through one router, scheduler, block manager and id map; checks that
# nothing stays tracked, every KV block comes back and memory stays flat (docs/operations.md#soak).
# Not part of `make test` (about a minute); ctest's soak_short runs the same checks on 20 K.
.PHONY: soak
soak: build
	@$(BUILD_DIR)/bin/meridian_soak --requests 1000000

# Benchmarks measure a Release build, the optimisation level of the wheel.
bench: setup
	@cmake -S . -B $(BUILD_DIR)-release -G Ninja -DCMAKE_BUILD_TYPE=Release -DMERIDIAN_BUILD_TESTS=OFF \
	  -DMERIDIAN_BUILD_BENCH=ON -DMERIDIAN_BUILD_APPS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR)-release -j $(JOBS) --target meridian_microbench meridian_cli
	@$(PYTHON) benchmarks/run_microbench.py --binary $(BUILD_DIR)-release/bin/meridian-microbench \
	  --out bench-out/microbench.json
	@$(PYTHON) benchmarks/run_probe_bench.py --cli $(BUILD_DIR)-release/bin/meridian --out bench-out/probe.json
	@$(PYTHON) benchmarks/fabric_loopback_bench.py --out bench-out/fabric-loopback.json >/dev/null

# The engine-in-the-loop study (docs/replay.md#engine-in-the-loop-replay): vLLM's own scheduler
# classes on the simulator's clock, workload mixed, vLLM's GPU default against Meridian's, the
# workload's window of arrivals (3,600 s on mixed) plus drain, each arm's goodput on the sustainable ruler searched
# from the simulator's, and again over twice the window (hours on 2 cores: docs/replay.md).
# engine-replay-fidelity: the simulator's error against each arm at 0.5x/0.9x/1.1x of its
# vllm-fcfs goodput (full runs, 60 s of arrivals).
ENGINE_REPLAY_ARGS ?= --goodput --window-check --workload mixed --seeds 1 --arms vllm-async,meridian-async
ENGINE_FIDELITY_ARGS ?= --fidelity --workload mixed --seeds 2 --duration-s 60
engine-replay: test-package
	@$(VENV)/bin/meridian engine-replay $(ENGINE_REPLAY_ARGS) --out-dir bench-out/engine-replay
engine-replay-fidelity: test-package
	@$(VENV)/bin/meridian engine-replay $(ENGINE_FIDELITY_ARGS) --out-dir bench-out/engine-replay-fidelity

# Only what the demo needs: the CLI and its libraries (no test or lint tools), then the
# replay on the default workload over three seeds (the figures of record use five; three keep
# the hour-long windows under five minutes on 2 cores): each policy's goodput on the
# sustainable ruler beside its physical bound, the A/B table at the calibrated default rate,
# the forcing Pareto sweep (tables on stdout, reports and plots in bench-out/).
demo:
	@scripts/setup.sh scripts/apt-packages-demo.txt requirements-demo.txt
	@cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) -DMERIDIAN_BUILD_TESTS=OFF \
	  -DMERIDIAN_BUILD_BENCH=OFF -DMERIDIAN_BUILD_APPS=ON $(CMAKE_FLAGS) >/dev/null
	@cmake --build $(BUILD_DIR) -j $(JOBS) --target meridian_cli
	@$(BUILD_DIR)/bin/meridian replay --goodput --pareto --seeds 3 --out-dir bench-out
	@$(PYTHON) benchmarks/plot_replay.py bench-out

clean:
	@rm -rf $(BUILD_DIR) $(BUILD_DIR)-asan $(BUILD_DIR)-tsan $(BUILD_DIR)-fuzz $(BUILD_DIR)-release bench-out
