# mmap3-reader (tools/reader): the C++20 live-capture profiler.
#
#   make reader           Release (-O2) build in build/reader
#   make reader-test      GoogleTest suite, then again built with ASan+UBSan
#                         (build/reader-asan); fails if either fails
#   make reader-e2e-host  record a test program on this kernel (MMAP2 +
#                         build-id mode), report it, check its symbols
#   make reader-e2e-vm    the same end-to-end tests in the patched guest
#                         (MMAP3 mode required), then in a guest of Debian's
#                         own 6.1.192 kernel (MMAP2 + build-id mode)
#   make fuzz             libFuzzer harnesses (clang, ASan+UBSan, in
#                         build/reader-fuzz) of the perf.data reader, the
#                         record decoder and ring framing, and the ELF reader,
#                         each run FUZZ_SECONDS (default 120) from a seed
#                         corpus of real captures; fails on a crash and keeps
#                         its input in tools/reader/fuzz/regressions/, which
#                         make reader-test replays.  Not part of make test.
#   make fuzz-smoke       the same harnesses built, then each run for
#                         FUZZ_SMOKE_RUNS (1000) inputs (fixed seed) from the seed
#                         corpus and the regressions: part of make test (a
#                         minute), so a harness that no longer builds or runs
#                         is seen there and not first at make fuzz
#   make reader-bench     replay throughput of synthetic records (a quick
#                         measurement, not a test)
#   make bench-reader     the benchmark table of tools/reader/README.md:
#                         replay of a 10M-record perf.data, report time
#                         against perf report, loss at 10 kHz on all CPUs
#                         of this host and of the patched guest, call-chain
#                         aggregation (BENCH_BASE_READER=another build's
#                         mmap3-reader: its rates beside this one's)
#   make bench-reader-chains  only the call-chain rows of bench-reader (no
#                         kernel, no guest; BENCH_BASE_READER as there)
#
# READER_BIN is the built binary, for other makefiles and scripts.

READER_SRC        := $(TOP)/tools/reader
READER_BUILD      := $(BUILD)/reader
READER_ASAN_BUILD := $(BUILD)/reader-asan
READER_BIN        := $(READER_BUILD)/mmap3-reader
export READER_BIN
READER_TESTS      := $(READER_BUILD)/mmap3_reader_tests
READER_ASAN_TESTS := $(READER_ASAN_BUILD)/mmap3_reader_tests
READER_FUZZ_BUILD := $(BUILD)/reader-fuzz
FUZZ_SECONDS      ?= 120
export FUZZ_SECONDS
# The machine has two cores shared with other work.
READER_JOBS       ?= 2

.PHONY: fuzz fuzz-smoke reader-fuzz reader reader-asan reader-test reader-e2e-host reader-e2e-vm reader-bench bench-reader bench-reader-chains reader-clean

# A configure that fails (a package missing, say) still leaves CMakeCache.txt,
# which would pass for a configured tree on the next make: it is removed.
$(READER_BUILD)/CMakeCache.txt: $(READER_SRC)/CMakeLists.txt | $(DEPS_STAMP)
	cmake -S $(READER_SRC) -B $(READER_BUILD) -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_CXX_FLAGS_RELEASE="-O2 -DNDEBUG" -DCMAKE_C_FLAGS_RELEASE="-O2 -DNDEBUG" || \
		{ rm -f $@; exit 1; }

# -O0 -g1: the sanitizers check the same at -O0, and line tables are all
# their reports need.  Measured side by side (clean build, 2 jobs): -O1 -g
# 866 s of CPU, -O1 -g1 642 s, -O0 -g1 351 s; the suite then runs 79 s
# instead of 41 s: about 3.5 min less in all.
$(READER_ASAN_BUILD)/CMakeCache.txt: $(READER_SRC)/CMakeLists.txt | $(DEPS_STAMP)
	cmake -S $(READER_SRC) -B $(READER_ASAN_BUILD) -DCMAKE_BUILD_TYPE=Debug \
		-DCMAKE_CXX_FLAGS_DEBUG="-O0 -g1" -DMMAP3_READER_SANITIZE=ON || \
		{ rm -f $@; exit 1; }

reader: $(READER_BUILD)/CMakeCache.txt
	cmake --build $(READER_BUILD) -j$(READER_JOBS)

reader-asan: $(READER_ASAN_BUILD)/CMakeCache.txt
	cmake --build $(READER_ASAN_BUILD) -j$(READER_JOBS) --target mmap3_reader_tests

# Both suites always run; the target fails if either had a failure.
reader-test: reader reader-asan
	@rc=0; \
	echo "== reader unit tests (Release)"; \
	$(READER_TESTS) || rc=1; \
	echo "== reader unit tests (ASan+UBSan)"; \
	ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 UBSAN_OPTIONS=print_stacktrace=1 \
		$(READER_ASAN_TESTS) || rc=1; \
	exit $$rc

# The fuzzers are built by clang (libFuzzer) with everything instrumented;
# -O1 for the fuzzers' pace, line tables for readable sanitizer reports.
$(READER_FUZZ_BUILD)/CMakeCache.txt: $(READER_SRC)/CMakeLists.txt | $(DEPS_STAMP)
	CC=clang CXX=clang++ cmake -S $(READER_SRC) -B $(READER_FUZZ_BUILD) \
		-DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" \
		-DCMAKE_C_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DMMAP3_READER_FUZZ=ON -DMMAP3_READER_TESTS=OFF || \
		{ rm -f $@; exit 1; }

reader-fuzz: $(READER_FUZZ_BUILD)/CMakeCache.txt
	cmake --build $(READER_FUZZ_BUILD) -j$(READER_JOBS) --target mmap3_fuzz_perf_data \
		mmap3_fuzz_records mmap3_fuzz_elf mmap3_fuzz_seeds

# The seed corpus is rebuilt each time (the captures take a second); the
# corpus the fuzzers grew is kept in build/reader-fuzz/corpus.
fuzz: reader reader-fuzz
	$(READER_SRC)/fuzz/make_corpus.sh $(READER_FUZZ_BUILD)/seeds $(READER_BIN) \
		$(READER_FUZZ_BUILD)/mmap3_fuzz_seeds
	$(READER_SRC)/fuzz/run_fuzz.sh $(READER_FUZZ_BUILD) $(READER_SRC)/fuzz/regressions

FUZZ_SMOKE_RUNS ?= 1000
fuzz-smoke: reader reader-fuzz
	@$(READER_SRC)/fuzz/make_corpus.sh $(READER_FUZZ_BUILD)/seeds $(READER_BIN) \
		$(READER_FUZZ_BUILD)/mmap3_fuzz_seeds
	@rc=0; for h in perf_data records elf; do \
		corpus=$(READER_FUZZ_BUILD)/smoke/$$h; rm -rf $$corpus; mkdir -p $$corpus; \
		reg=$(READER_SRC)/fuzz/regressions/$$h; [ -d $$reg ] || reg=; \
		if $(READER_FUZZ_BUILD)/mmap3_fuzz_$$h -seed=1 -runs=$(FUZZ_SMOKE_RUNS) -timeout=10 \
			-artifact_prefix=$$corpus/crash- $$corpus $(READER_FUZZ_BUILD)/seeds/$$h $$reg \
			>$(READER_FUZZ_BUILD)/smoke-$$h.log 2>&1; then \
			echo "fuzz-smoke $$h: ok, $(FUZZ_SMOKE_RUNS) inputs, $$(sed -n 's/.*DONE *\(cov: [0-9]*\).*/\1/p' \
				$(READER_FUZZ_BUILD)/smoke-$$h.log)"; \
		else \
			rc=1; echo "fuzz-smoke $$h: FAILED (log: $(READER_FUZZ_BUILD)/smoke-$$h.log)"; \
			grep -E '^(==[0-9]+==ERROR|SUMMARY)' $(READER_FUZZ_BUILD)/smoke-$$h.log | head -n 3; \
		fi; \
	done; exit $$rc

reader-e2e-host: reader
	READER_BIN=$(READER_BIN) WORK_DIR=$(BUILD)/reader-e2e \
		$(READER_SRC)/tests/e2e_host.sh

# One boot per kernel; the guest's / is the host's, read-only, so the work
# directory is in the guest's /tmp.  Both runs always happen; the target
# fails if either had a failure (each ends with a GoogleTest-style summary).
# Bounds a hung guest, not the suite's pace: the suite takes 8-10 min alone
# under TCG and more beside make test's debug lane (600 s was hit there).
READER_E2E_VM_TIMEOUT ?= 2400
_reader_e2e_vm = $(VM_RUN) --timeout $(READER_E2E_VM_TIMEOUT) $(1) \
	--env READER_BIN=$(READER_BIN) --env WORK_DIR=/tmp/reader-e2e \
	--env E2E_EXPECT_MODE=$(2) --env E2E_SUITE=$(3) -- $(READER_SRC)/tests/e2e_host.sh

# The stock guest boots Debian's own kernel of the same version
# (make distro-kernel: fetched, not built), the kernel a user of the reader
# runs; make demo's coverage comparison keeps its stock build of the same
# configuration as the patched kernel.
reader-e2e-vm: _kernel_quiet := 1
# The patched guest also loads the test module (selftests/mmap3_testmod),
# whose loads and unloads its kernel reports.
reader-e2e-vm: reader $(BZIMAGE) $(TESTMOD) $(DISTRO_KERNEL) $(VM_INITRAMFS)
	@rc=0; \
	echo "== reader e2e in the patched guest (MMAP3)"; \
	$(call _reader_e2e_vm,--kernel $(BZIMAGE) --env E2E_TEST_MODULE=$(TESTMOD),mmap3,e2e_vm_mmap3) || rc=1; \
	echo "== reader e2e in the stock guest, Debian's $$(cut -d' ' -f1 $(BUILD)/distro-kernel/version) (MMAP2 + build-id)"; \
	$(call _reader_e2e_vm,--distro,mmap2-build-id,e2e_vm_stock) || rc=1; \
	exit $$rc

reader-bench: reader
	$(READER_BUILD)/mmap3_reader_bench 10000000

bench-reader: deps
	@$(MAKE) -s reader $(BZIMAGE) $(VM_INITRAMFS) >/dev/null
	@READER_BIN=$(READER_BIN) BENCH_DIR=$(BUILD)/reader-bench BZIMAGE=$(BZIMAGE) \
		VM_RUN=$(VM_RUN) $(READER_SRC)/tests/bench_reader.sh

bench-reader-chains: reader
	@READER_BIN=$(READER_BIN) BENCH_DIR=$(BUILD)/reader-bench BENCH_ONLY=chains \
		$(READER_SRC)/tests/bench_reader.sh

reader-clean:
	rm -rf $(READER_BUILD) $(READER_ASAN_BUILD) $(READER_FUZZ_BUILD) $(BUILD)/reader-e2e $(BUILD)/reader-bench
