# Kernel-side tests: the kselftest-harness selftests (selftests/), the KUnit
# module (Kbuild, module/) and the uapi agreement check, all built against
# the patched tree, and the run of all of them inside the patched guest.
#
#   make selftests    build/selftests: mmap3_test, its DSO, fixtures and
#                     fuse_backing (the FUSE daemon some tests mount)
#   make module       build/module: mmap3_kunit.ko
#   make uapi-check   uapi/linux/perf_event_mmap3.h agrees with the series
#   make vm-test      boot the patched kernel, run all of the above, TAP out

SELFTEST_DIR := $(BUILD)/selftests
SELFTEST_BIN := $(SELFTEST_DIR)/mmap3_test
MODULE_DIR   := $(BUILD)/module
MODULE_KO    := $(MODULE_DIR)/module/mmap3_kunit.ko
HARNESS_DIR  := $(KSRC)/tools/testing/selftests

SELFTEST_CFLAGS := -O2 -g -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-format-truncation \
	-I$(HARNESS_DIR) -I$(TOP)/uapi
SELFTEST_SRCS := $(TOP)/selftests/mmap3_util.c
SELFTEST_HDRS := $(TOP)/selftests/mmap3_util.h $(TOP)/uapi/linux/perf_event_mmap3.h

.PHONY: selftests module uapi-check vm-test

selftests: $(SELFTEST_BIN) $(SELFTEST_DIR)/libmmap3_dso.so $(SELFTEST_DIR)/fixtures/cold.elf \
	$(SELFTEST_DIR)/fuse_backing

# The harness header comes from the extracted kernel tree, so the tree must
# exist first; the image target is what prepares it.
$(SELFTEST_BIN): $(TOP)/selftests/mmap3_test.c $(SELFTEST_SRCS) $(SELFTEST_HDRS) | $(BZIMAGE)
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) -o $@ $< $(SELFTEST_SRCS) -lelf -ldl -lpthread

$(SELFTEST_DIR)/mkfixture: $(TOP)/selftests/mkfixture.c $(SELFTEST_SRCS) $(SELFTEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) -o $@ $< $(SELFTEST_SRCS) -lelf

$(SELFTEST_DIR)/fixtures/cold.elf: $(SELFTEST_DIR)/mkfixture
	@mkdir -p $(@D)
	$< $(@D)

# libfuse3 (Debian libfuse3-dev, in DEPS_READER); mmap3_test runs it from
# its own directory.
$(SELFTEST_DIR)/fuse_backing: $(TOP)/selftests/fuse_backing.c
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) $$(pkg-config --cflags fuse3) -o $@ $< \
		$$(pkg-config --libs fuse3)

$(SELFTEST_DIR)/libmmap3_dso.so: $(TOP)/selftests/dso.c
	@mkdir -p $(@D)
	$(CC) -O2 -shared -fPIC -Wl,--build-id=sha1 -o $@ $<

# Kbuild writes its objects next to the sources, so the module is built in
# build/module through symlinks to the real Kbuild files and sources.
module: $(MODULE_KO)

$(MODULE_KO): $(TOP)/Kbuild $(TOP)/module/Kbuild $(TOP)/module/mmap3_kunit.c $(BZIMAGE)
	@mkdir -p $(MODULE_DIR)/module
	@ln -sf $(TOP)/Kbuild $(MODULE_DIR)/Kbuild
	@ln -sf $(TOP)/module/Kbuild $(MODULE_DIR)/module/Kbuild
	@ln -sf $(TOP)/module/mmap3_kunit.c $(MODULE_DIR)/module/mmap3_kunit.c
	$(MAKE) -s -C $(KOBJ) M=$(MODULE_DIR) modules

uapi-check: $(BUILD)/uapi/uapi_check
	$<

$(BUILD)/uapi/uapi_check: $(TOP)/uapi/uapi_check.c $(TOP)/uapi/linux/perf_event_mmap3.h $(BZIMAGE)
	@mkdir -p $(@D)
	$(CC) -Wall -Werror -I$(KHDR) -I$(TOP)/uapi -o $@ $<

# Everything the guest runs, then one boot that runs it all.
vm-test: selftests module uapi-check $(VM_INITRAMFS)
	$(VM_RUN) --kernel $(BZIMAGE) -- $(TOP)/scripts/test/guest-tests $(BUILD)
