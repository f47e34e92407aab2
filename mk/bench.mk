# Kernel benchmarks, in the guest: build-ID coverage over real programs and
# the cost per mapping operation, stock 6.1.192 against the patched kernel.
#
#   make bench-kernel     prints the tables that go into the README

BENCH_DIR := $(BUILD)/bench
BENCH_TOOLS := $(BENCH_DIR)/mmap3-coverage $(BENCH_DIR)/mmap3-opcost \
	$(BENCH_DIR)/mmap3-coldmap $(BENCH_DIR)/mmap3-kprofile

.PHONY: bench-kernel

$(BENCH_DIR)/mmap3-%: $(TOP)/tools/bench/%.c $(SELFTEST_SRCS) $(SELFTEST_HDRS)
	@mkdir -p $(@D)
	$(CC) -O2 -Wall -I$(TOP)/selftests -I$(TOP)/uapi -o $@ $< $(SELFTEST_SRCS) -lelf -ldl -lpthread

bench-kernel: deps
	@$(MAKE) -s $(BENCH_TOOLS) $(SELFTEST_DIR)/libmmap3_dso.so $(BZIMAGE) \
		$(KSTOCK_BZIMAGE) $(VM_INITRAMFS)
	@$(TOP)/scripts/bench/kernel
