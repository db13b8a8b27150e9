# Thin wrapper around CMake/ctest/pytest. `make help` lists the targets.
BUILD_DIR ?= build
BUILD_TYPE ?= RelWithDebInfo
PYTHON := /usr/bin/python3
JOBS ?= $(shell nproc)

# Debian 12 packages l5pg needs to build, test, demo and benchmark.
DEB_PACKAGES := build-essential cmake ninja-build pkg-config clang-format \
  libevent-dev libspdlog-dev libfmt-dev libyaml-cpp-dev catch2 libpq-dev \
  libibverbs-dev librdmacm-dev libssl-dev dpkg-dev openssl postgresql-15 postgresql-contrib pgbouncer \
  python3 python3-pytest python3-pytest-timeout python3-pytest-xdist python3-psycopg2 python3-psycopg \
  python3-matplotlib strace systemd debootstrap

# make test's sanitizer pass (sanitize-test): ASan+UBSan on the unit tests and on l5pgd for
# an integration subset (with the plain shim: an instrumented one preloaded into psql hangs
# it after the upgrade, not yet understood); TSan on l5pgd (acceptor, workers, metrics
# thread) for another subset, after the threaded unit tests (TSAN_UNIT).
ASAN_BUILD_DIR ?= build-asan
TSAN_BUILD_DIR ?= build-tsan
ASAN_IT := test_startup.py test_hostile_shm.py test_auth.py test_tls.py test_psql.py test_rdma.py \
  test_admin_console.py test_pool.py test_upstream_lookup.py
# TSan's unit tests: the ring stress test (two processes, each with its waits), the soft RDMA
# device (a thread per queue pair), the wait primitive, the metrics server thread, the daemon's
# queues. A test binary exits non-zero when TSan reported anything.
TSAN_UNIT := shm_test rdma_test wait_test metrics_test daemon_test shim_channel_test
TSAN_IT := test_startup.py test_tls.py test_connection_burst.py test_psql.py test_auth.py \
  test_shutdown_fatal.py test_admin_console.py test_reload.py test_notify.py test_pool.py \
  test_upstream_lookup.py test_health.py
# -O1 -g1: the sanitizer builds compile about twice as fast as at -O2 -g and keep file:line
# in reports (-O0 compiles faster still but runs the sanitized tests twice as long). Unity
# builds (CMake joins each target's sources into batches of 8) parse and instrument the
# shared headers once per batch instead of once per file. With Catch2's runner built plainly
# (tests/CMakeLists.txt) and no benchmark tools, the ASan build takes 3.1-3.5 min instead of
# 5.4 on 2 cores, the TSan build 1.0 instead of 1.8.
SANITIZER_CMAKE := -G Ninja -DCMAKE_BUILD_TYPE=Release "-DCMAKE_CXX_FLAGS_RELEASE=-O1 -g1" \
  "-DCMAKE_C_FLAGS_RELEASE=-O1 -g1" -DCMAKE_UNITY_BUILD=ON
SANITIZER_ENV := ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 \
  UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 TSAN_OPTIONS=halt_on_error=0:second_deadlock_stack=1

# The integration suites spend most of their time waiting (for timeouts, for Postgres, for
# clients to leave), so their modules run on $(JOBS) pytest workers (pytest-xdist; each worker
# starts its own Postgres cluster and l5pgd, each module stays on one worker). The tests
# marked serial (tests/integration/conftest.py) need the other CPUs quiet and run alone after.
# $(call integration,ENVIRONMENT,TESTS): TESTS in tests/integration, so; pytest's exit status
# 5 is a subset without serial tests.
PYTEST := $(PYTHON) -m pytest -q -p no:cacheprovider
define integration
	cd tests/integration && $(1) $(PYTEST) -n $(JOBS) --dist loadfile -m "not serial" $(2)
	cd tests/integration && { $(1) $(PYTEST) -m serial $(2) || [ $$? = 5 ]; }
endef

# Only for `make fuzz`: clang with libFuzzer and the sanitizer runtimes.
FUZZ_PACKAGES := clang libclang-rt-14-dev
FUZZ_BUILD_DIR ?= build-fuzz
FUZZ_SECONDS ?= 60

.PHONY: help deps install-packages build package test sanitize-test soak image-check unit-test integration-test demo bench fuzz format format-check clean

help:
	@echo "make deps              install missing Debian packages (as root, else prints the command)"
	@echo "make build             configure and build into $(BUILD_DIR)/ (l5pgd, libl5pg.so, tests)"
	@echo "make package           build/l5pg_<version>_<arch>.deb (CPack; Depends from dpkg-shlibdeps)"
	@echo "make test              build, then unit tests (ctest) and integration tests (pytest, real Postgres)"
	@echo "make demo              pgbench over direct TCP/Unix and l5pgd TCP/Unix/SHM, prints a table"
	@echo "make bench             pgbench benchmark (direct, PgBouncer, l5pgd; 3 placements) into bench/results/"
	@echo "                       QUICK=1: reduced matrix (<15 min on 2 cores); BENCH_ARGS='...' more options"
	@echo "make soak              200 SHM sessions for SOAK_MINUTES (default 10): errors, RSS, fds, CPU"
	@echo "make image-check       l5pgd and a shimmed psql from the docker image's file set (debootstrap)"
	@echo "make fuzz              libFuzzer on every target in tests/fuzz for FUZZ_SECONDS (default 60) each"
	@echo "make format            clang-format all C++ sources"

deps:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"

install-packages:
	@missing=$$(for p in $(PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q '^install ok installed' || echo $$p; \
	  done); \
	if [ -z "$$missing" ]; then echo "deps: all Debian packages present"; exit 0; fi; \
	if [ "$$(id -u)" = 0 ]; then \
	  echo "deps: installing $$missing"; \
	  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends $$missing || exit 1; \
	  if printf '%s\n' $$missing | grep -qx pgbouncer && [ -d /run/systemd/system ]; then \
	    echo "deps: disabling Debian's pgbouncer service, which the package started on 127.0.0.1:6432 (l5pgd's port; the benchmark runs a PgBouncer of its own)"; \
	    systemctl disable --now pgbouncer || true; \
	  fi; \
	else \
	  echo "deps: missing packages; run as root:"; \
	  echo "  apt-get update && apt-get install -y $$missing"; exit 1; \
	fi

$(BUILD_DIR)/build.ninja: | deps
	cmake -S . -B $(BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=$(BUILD_TYPE)

build: deps $(BUILD_DIR)/build.ninja
	cmake --build $(BUILD_DIR) -j $(JOBS)

# The .deb of what `make build` built (no rebuild with other flags): build/l5pg_*.deb.
package: build
	cd $(BUILD_DIR) && cpack -G DEB

unit-test: build
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS) -L unit

integration-test: build
	$(call integration,L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)),.)

test: build
	@echo "== unit tests (ctest) =="
	cd $(BUILD_DIR) && ctest --output-on-failure -j $(JOBS)
	@echo "== integration tests (pytest, real PostgreSQL 15) =="
	@$(MAKE) --no-print-directory integration-test
	@echo "== RDMA on real hardware (verbs device; skipped without one) =="
	L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)) tests/rdma/hw-test.sh
	@$(MAKE) --no-print-directory sanitize-test

sanitize-test: deps
	@echo "== ASan+UBSan: unit tests, then l5pgd under $(ASAN_IT) =="
	cmake -S . -B $(ASAN_BUILD_DIR) $(SANITIZER_CMAKE) -DL5PG_SANITIZE=ON
	cmake --build $(ASAN_BUILD_DIR) -j $(JOBS)
	cd $(ASAN_BUILD_DIR) && $(SANITIZER_ENV) ctest --output-on-failure -j $(JOBS) -L unit
	$(call integration,$(SANITIZER_ENV) L5PG_BUILD_DIR=$(abspath $(ASAN_BUILD_DIR)) \
	  L5PG_SHIM_BUILD_DIR=$(abspath $(BUILD_DIR)),$(ASAN_IT))
	@echo "== TSan: the threaded unit tests ($(TSAN_UNIT)), then l5pgd under $(TSAN_IT) =="
	cmake -S . -B $(TSAN_BUILD_DIR) $(SANITIZER_CMAKE) -DL5PG_TSAN=ON
	cmake --build $(TSAN_BUILD_DIR) -j $(JOBS) --target l5pgd $(TSAN_UNIT)
	for t in $(TSAN_UNIT); do $(SANITIZER_ENV) $(TSAN_BUILD_DIR)/bin/$$t || exit 1; done
	$(call integration,$(SANITIZER_ENV) L5PG_BUILD_DIR=$(abspath $(TSAN_BUILD_DIR)) \
	  L5PG_SHIM_BUILD_DIR=$(abspath $(BUILD_DIR)),$(TSAN_IT))

demo: build
	L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/demo.py

# QUICK=1 (anything but empty or 0) runs the reduced matrix; BENCH_ARGS passes further options
# to bench/run_bench.py (see `$(PYTHON) bench/run_bench.py --help`).
bench: build
	L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) bench/run_bench.py \
	  $(if $(filter-out 0,$(QUICK)),--quick) $(BENCH_ARGS)

SOAK_MINUTES ?= 10
soak: build
	L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tests/soak/run_soak.py --minutes $(SOAK_MINUTES)

# The sidecar image's runtime file set, without a container engine (debootstrap + chroot).
image-check: build
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES)"
	L5PG_BUILD_DIR=$(abspath $(BUILD_DIR)) $(PYTHON) tests/container/check_image_files.py \
	  --build-dir $(abspath $(BUILD_DIR))

fuzz:
	@$(MAKE) --no-print-directory install-packages PACKAGES="$(DEB_PACKAGES) $(FUZZ_PACKAGES)"
	CC=clang CXX=clang++ cmake -S . -B $(FUZZ_BUILD_DIR) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DL5PG_FUZZ=ON
	cmake --build $(FUZZ_BUILD_DIR) --target fuzz_targets -j $(JOBS)
	tests/fuzz/run_fuzz.sh $(FUZZ_BUILD_DIR) $(FUZZ_SECONDS)

format:
	clang-format -i $$(git ls-files '*.cpp' '*.hpp' '*.h')

format-check:
	clang-format --dry-run --Werror $$(git ls-files '*.cpp' '*.hpp' '*.h')

clean:
	rm -rf $(BUILD_DIR) $(FUZZ_BUILD_DIR)
