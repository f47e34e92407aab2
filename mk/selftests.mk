# Kernel-side tests: the kselftest-harness selftests (selftests/), the KUnit
# suite (kunit/) and the uapi agreement check, all built against the patched
# tree, and the run of all of them inside the patched guest.  The series puts
# the selftests and the KUnit suite into the kernel tree
# (tools/testing/selftests/perf_events, lib/buildid_kunit.c): the project's
# files are their one source, copied there by scripts/kernel/in-tree-tests.
#
#   make selftests    build/selftests: mmap3_test, its DSO, fixtures,
#                     fuse_backing (the FUSE daemon some tests mount) and
#                     coda_venus (the Coda cache manager one mounts), built
#                     against uapi/ (what the host and the debug lane run);
#                     the test module (build/testmod/<kernel>/) is built
#                     against the kernel each guest lane boots
#   make intree-tests the series' copies are the project's files, and the
#                     kselftest Makefile of the patched tree builds them
#                     against its own headers: build/intree-selftests
#   make uapi-check   uapi/linux/perf_event_mmap3.h agrees with the series
#   make vm-test      boot the patched kernel, run the in-tree build of the
#                     selftests and report the KUnit suite it ran at boot
#
# The reliability gates, on the debug kernel (make kernel-debug: lockdep,
# KASAN, kmemleak, DEBUG_VM, DEBUG_LIST, DEBUG_ATOMIC_SLEEP); each fails on
# any lockdep, KASAN, kmemleak, sleeping-in-atomic, WARNING, BUG or Oops
# line in the guest's logs (scripts/test/scan-kernel-log):
#   make vm-test-debug   the selftests and KUnit, timeouts scaled by
#                        VM_TEST_DEBUG_SCALE (4)
#   make vm-trinity      trinity for TRINITY_SECONDS (180) as nobody, while
#                        mmap3_watch checks every record of a CPU-wide MMAP3
#                        event
#   make vm-test-debug-selfcheck  the log scanner and mmap3_watch's record
#                        checks fed known-bad input (no VM)

SELFTEST_DIR := $(BUILD)/selftests
SELFTEST_BIN := $(SELFTEST_DIR)/mmap3_test
INTREE_SELFTEST_DIR := $(BUILD)/intree-selftests
WATCH_BIN    := $(SELFTEST_DIR)/mmap3_watch
# (the sources include "../kselftest_harness.h", as they do in the tree)
HARNESS_DIR  := $(KSRC)/tools/testing/selftests/perf_events

SELFTEST_CFLAGS := -O2 -g -Wall -Wextra -Wno-sign-compare -Wno-unused-parameter \
	-Wno-missing-field-initializers -Wno-format-truncation \
	-I$(HARNESS_DIR) -I$(TOP)/uapi
SELFTEST_SRCS := $(TOP)/selftests/mmap3_util.c
SELFTEST_HDRS := $(TOP)/selftests/mmap3_util.h $(TOP)/uapi/linux/perf_event_mmap3.h

.PHONY: selftests intree-tests uapi-check vm-test vm-test-debug vm-trinity \
	vm-test-debug-selfcheck

selftests: $(SELFTEST_BIN) $(SELFTEST_DIR)/libmmap3_dso.so $(SELFTEST_DIR)/fixtures/cold.elf \
	$(SELFTEST_DIR)/fuse_backing $(SELFTEST_DIR)/coda_venus $(WATCH_BIN)

# The harness header comes from the extracted kernel tree, so the tree must
# exist first (but no kernel: make vm-test-debug needs only the debug one).
$(SELFTEST_BIN): $(TOP)/selftests/mmap3_test.c $(SELFTEST_SRCS) $(SELFTEST_HDRS) | kernel-source
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) -o $@ $< $(SELFTEST_SRCS) -lelf -ldl -lpthread

$(WATCH_BIN): $(TOP)/selftests/mmap3_watch.c $(SELFTEST_SRCS) $(SELFTEST_HDRS)
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) -o $@ $< $(SELFTEST_SRCS) -lelf

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

# The uapi <linux/coda.h> of the host (linux-libc-dev); mmap3_test runs it
# from its own directory.
$(SELFTEST_DIR)/coda_venus: $(TOP)/selftests/coda_venus.c
	@mkdir -p $(@D)
	$(CC) $(SELFTEST_CFLAGS) -o $@ $< -lpthread

$(SELFTEST_DIR)/libmmap3_dso.so: $(TOP)/selftests/mmap3_dso.c
	@mkdir -p $(@D)
	$(CC) -O2 -shared -fPIC -Wl,--build-id=sha1 -o $@ $<

# The test module (selftests/mmap3_testmod), built against each kernel the
# guest tests boot: its vermagic must be the running kernel's.
TESTMOD_SRC := $(TOP)/selftests/mmap3_testmod
TESTMOD     := $(BUILD)/testmod/kernel/mmap3_testmod.ko
TESTMOD_DEBUG := $(BUILD)/testmod/debug/mmap3_testmod.ko
# _testmod KOBJ: build the module in this target's directory
_testmod = rm -rf $(@D) && mkdir -p $(@D) && cp $(TESTMOD_SRC)/mmap3_testmod.c \
	$(TESTMOD_SRC)/Kbuild $(@D)/ && $(MAKE) -s -C $(1) M=$(@D) modules

$(TESTMOD): $(TESTMOD_SRC)/mmap3_testmod.c $(TESTMOD_SRC)/Kbuild $(BZIMAGE)
	$(call _testmod,$(KOBJ))

$(TESTMOD_DEBUG): $(TESTMOD_SRC)/mmap3_testmod.c $(TESTMOD_SRC)/Kbuild $(KDEBUG_BZIMAGE)
	$(call _testmod,$(KDEBUG_OBJ))

# The copies in the patched tree must be the project's files (a failure
# names the file and says how to regenerate the series), and the tree's own
# kselftest Makefile must build them, with the tree's headers.
intree-tests: $(BZIMAGE)
	$(TOP)/scripts/kernel/in-tree-tests --check $(KSRC)
	@mkdir -p $(INTREE_SELFTEST_DIR)
	$(MAKE) -s -C $(KSRC)/tools/testing/selftests/perf_events \
		OUTPUT=$(INTREE_SELFTEST_DIR) KHDR_INCLUDES="-isystem $(KHDR)"

uapi-check: $(BUILD)/uapi/uapi_check
	$<

$(BUILD)/uapi/uapi_check: $(TOP)/uapi/uapi_check.c $(TOP)/uapi/linux/perf_event_mmap3.h $(BZIMAGE)
	@mkdir -p $(@D)
	$(CC) -Wall -Werror -I$(KHDR) -I$(TOP)/uapi -o $@ $<

# Everything the guest runs, then one boot that runs it all.
vm-test: intree-tests uapi-check $(TESTMOD) $(VM_INITRAMFS)
	$(VM_RUN) --kernel $(BZIMAGE) -- $(TOP)/scripts/test/guest-tests $(BUILD) \
		--selftests $(INTREE_SELFTEST_DIR) --testmod $(TESTMOD)

# The reliability gates (see the top of this file).  The guest timeouts
# bound a hung guest, not the tests' own pace.
VM_TEST_DEBUG_SCALE   ?= 4
VM_TEST_DEBUG_TIMEOUT ?= 3600
TRINITY_SECONDS       ?= 180

vm-test-debug: selftests $(KDEBUG_BZIMAGE) $(TESTMOD_DEBUG) $(VM_INITRAMFS)
	@$(TOP)/scripts/test/vm-debug-run vm-test-debug $(VM_TEST_DEBUG_TIMEOUT) \
		env MMAP3_TEST_TIMEOUT_SCALE=$(VM_TEST_DEBUG_SCALE) \
		$(TOP)/scripts/test/guest-tests $(BUILD) --kobj $(KDEBUG_OBJ) \
		--testmod $(TESTMOD_DEBUG)

vm-trinity: selftests $(KDEBUG_BZIMAGE) $(VM_INITRAMFS)
	@$(TOP)/scripts/test/vm-debug-run vm-trinity $$(($(TRINITY_SECONDS) + 900)) \
		$(TOP)/scripts/test/guest-trinity $(BUILD) $(TRINITY_SECONDS)

vm-test-debug-selfcheck: $(WATCH_BIN)
	@$(TOP)/scripts/test/scan-kernel-log-test && $(WATCH_BIN) --selfcheck
