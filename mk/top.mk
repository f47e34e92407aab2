# The two commands the README leads with, and the series checks.
#
#   make demo           the main job: the replace-during-profile scenario
#   make test           every test; the last line is "N passed, N failed"
#   make check-series   checkpatch --strict on every patch, and a build of
#                       the tree after each patch, and of perf after each
#                       tools patch (slow: a kernel build each)

.PHONY: help test demo checkpatch check-series check-series-perf

help:
	@echo "make demo          boot the patched kernel and show MMAP3 records for a"
	@echo "                   library replaced while it is being profiled"
	@echo "make test          all tests (unit, kernel build, VM); ends 'N passed, N failed'"
	@echo "make kernel        patched Linux 6.1.192 under build/kernel"
	@echo "make vm-run CMD=.. run a command in the patched guest"
	@echo "make vm-test       selftests (the in-tree copy) and KUnit in the patched guest"
	@echo "make reader        build/reader/mmap3-reader"
	@echo "make perf          build/perf/perf: perf of the patched tree (reads MMAP3)"
	@echo "make perf-test     that perf on an MMAP3 capture of the replace scenario"
	@echo "make perf-test-full all of perf test, that perf against the unpatched one (slow)"
	@echo "make checkpatch    scripts/checkpatch.pl --strict on kernel-patches/"
	@echo "make check-series  checkpatch, and build the tree (and perf) after each patch"
	@echo "                   (RESUME=1: go on from where a stopped run was)"
	@echo "make check-series-perf  checkpatch, and build perf after each tools patch"

test: deps
	@$(TOP)/scripts/test/all

checkpatch: $(BZIMAGE)
	@$(TOP)/scripts/kernel/check-series --checkpatch-only $(KSRC)

check-series: $(BZIMAGE) deps
	@PERF_MAKE_FLAGS="$(PERF_FEATURES_OFF)" $(TOP)/scripts/kernel/check-series \
		$(if $(RESUME),--resume) $(KSRC)

check-series-perf: kernel-source deps
	@PERF_MAKE_FLAGS="$(PERF_FEATURES_OFF)" $(TOP)/scripts/kernel/check-series --perf-only $(KSRC)

# The demo: the replace-during-profile scenario under mmap3-reader in the
# patched guest, stock perf in the stock guest and the series' perf
# (make perf) in the patched guest (scripts/demo/run), then the same
# scenario through the kernel's records alone (mmap3-demo).
DEMO_BIN := $(BUILD)/demo/mmap3-demo

$(DEMO_BIN): $(TOP)/tools/demo/mmap3_demo.c $(SELFTEST_SRCS) $(SELFTEST_HDRS)
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -I$(TOP)/selftests -I$(TOP)/uapi -o $@ $< $(SELFTEST_SRCS) -lelf

demo: deps
	@$(MAKE) -s $(DEMO_BIN) $(SELFTEST_DIR)/fixtures/cold.elf $(BZIMAGE) \
		$(KSTOCK_BZIMAGE) $(VM_INITRAMFS)
	@$(MAKE) -s reader >/dev/null
	@$(MAKE) -s perf >/dev/null
	@echo "##### A library replaced while it is being profiled"
	@READER_BIN=$(READER_BIN) PERF_BIN=$(PERF_BIN) $(TOP)/scripts/demo/run
	@echo; echo "##### The kernel's records for the same scenario (tools/demo/mmap3-demo)"
	@echo "=== patched 6.1.192: PERF_RECORD_MMAP3"
	@$(VM_RUN) --kernel $(BZIMAGE) -- $(DEMO_BIN) $(SELFTEST_DIR)/fixtures/cold.elf; \
	echo; echo "=== stock 6.1.192: PERF_RECORD_MMAP2 + build_id"; \
	$(VM_RUN) --stock -- $(DEMO_BIN) $(SELFTEST_DIR)/fixtures/cold.elf || \
	echo "(mmap3-demo exits 1 when a record lacks the right build ID: expected on stock)"
