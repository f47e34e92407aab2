# The kernel: Linux 6.1.192 from Debian's linux-source-6.1 with the mmap3
# series (kernel-patches/series) applied, configured from tinyconfig plus
# kernel/config.fragment, built out of tree.  scripts/kernel/build does the
# work and is incremental; these targets always call it and it decides.
#
#   make kernel          build/kernel/{src,obj}: patched
#   make kernel-debug    build/kernel/obj-debug: the same patched source with
#                        kernel/config-debug.fragment on top (lockdep, KASAN,
#                        kmemleak, DEBUG_VM, DEBUG_LIST, DEBUG_ATOMIC_SLEEP)
#   make kernel-stock    build/kernel-stock/{src,obj}: unpatched baseline
#   make kernel-source   build/kernel/src only (extracted, series applied)
#
# For the other .mk files:
#   KSRC KOBJ BZIMAGE KHDR             the patched kernel
#   KDEBUG_OBJ KDEBUG_BZIMAGE          its debug flavor (source: KSRC)
#   KSTOCK_SRC KSTOCK_OBJ KSTOCK_BZIMAGE  the baseline
# Build an out-of-tree module with: $(MAKE) -C $(KOBJ) M=<dir> modules
# (after the kernel target).  KHDR is the patched uapi (make headers), for
# -I$(KHDR).

KERNEL_TARBALL ?= /usr/src/linux-source-6.1.tar.xz
KERNEL_FRAGMENT := $(TOP)/kernel/config.fragment
KERNEL_SERIES_FRAGMENT := $(TOP)/kernel/config-series.fragment
KERNEL_DEBUG_FRAGMENT := $(TOP)/kernel/config-debug.fragment

KSRC           := $(BUILD)/kernel/src
KOBJ           := $(BUILD)/kernel/obj
BZIMAGE        := $(KOBJ)/arch/x86/boot/bzImage
KHDR           := $(KOBJ)/usr/include
KDEBUG_OBJ     := $(BUILD)/kernel/obj-debug
KDEBUG_BZIMAGE := $(KDEBUG_OBJ)/arch/x86/boot/bzImage
KSTOCK_SRC     := $(BUILD)/kernel-stock/src
KSTOCK_OBJ     := $(BUILD)/kernel-stock/obj
KSTOCK_BZIMAGE := $(KSTOCK_OBJ)/arch/x86/boot/bzImage

# _kernel_quiet is set by targets whose stdout is not about the kernel
# (vm-run); as a target-specific variable it reaches this prerequisite.
_kernel_env = BUILD='$(BUILD)' KERNEL_TARBALL='$(KERNEL_TARBALL)' NPROC='$(NPROC)' \
	KBUILD_VERBOSE='$(if $(filter 1,$(V)),1,0)' KERNEL_QUIET='$(_kernel_quiet)'

.PHONY: kernel kernel-debug kernel-stock kernel-source kernel-config kernel-clean \
	kernel-debug-clean kernel-stock-clean _kernel-force

# The image files are the real targets: their recipe always runs (the script
# is incremental) and rules that depend on $(BZIMAGE) rebuild only when the
# image actually changed.  Phony rules can depend on `kernel` instead.
kernel: $(BZIMAGE)
kernel-debug: $(KDEBUG_BZIMAGE)
kernel-stock: $(KSTOCK_BZIMAGE)

$(BZIMAGE): _kernel-force
	+@$(_kernel_env) $(TOP)/scripts/kernel/build
$(KDEBUG_BZIMAGE): _kernel-force
	+@$(_kernel_env) $(TOP)/scripts/kernel/build --debug
$(KSTOCK_BZIMAGE): _kernel-force
	+@$(_kernel_env) $(TOP)/scripts/kernel/build --stock
_kernel-force:

# Only the patched source tree (selftests need its kselftest_harness.h).
kernel-source:
	+@$(_kernel_env) $(TOP)/scripts/kernel/build --source

# Re-check that the fragment's options are what .config has.
kernel-config:
	@$(TOP)/scripts/kernel/check-config $(KOBJ)/.config $(KERNEL_FRAGMENT) \
		$(KERNEL_SERIES_FRAGMENT) && \
		echo "kernel-config: every option in kernel/config{,-series}.fragment is set in $(KOBJ)/.config"

kernel-clean:
	rm -rf $(BUILD)/kernel

kernel-debug-clean:
	rm -rf $(KDEBUG_OBJ) $(BUILD)/kernel/stamps/config-debug

kernel-stock-clean:
	rm -rf $(BUILD)/kernel-stock
