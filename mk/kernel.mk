# The kernel: Linux 6.1.192 from Debian's linux-source-6.1 with the mmap3
# series (kernel-patches/series) applied, configured from tinyconfig plus
# kernel/config.fragment, built out of tree.  scripts/kernel/build does the
# work and is incremental; these targets always call it and it decides.
#
#   make kernel          build/kernel/{src,obj}: patched
#   make kernel-stock    build/kernel-stock/{src,obj}: unpatched baseline
#
# For the other .mk files:
#   KSRC KOBJ BZIMAGE KHDR             the patched kernel
#   KSTOCK_SRC KSTOCK_OBJ KSTOCK_BZIMAGE  the baseline
# Build an out-of-tree module with: $(MAKE) -C $(KOBJ) M=<dir> modules
# (after the kernel target).  KHDR is the patched uapi (make headers), for
# -I$(KHDR).

KERNEL_TARBALL ?= /usr/src/linux-source-6.1.tar.xz
KERNEL_FRAGMENT := $(TOP)/kernel/config.fragment

KSRC           := $(BUILD)/kernel/src
KOBJ           := $(BUILD)/kernel/obj
BZIMAGE        := $(KOBJ)/arch/x86/boot/bzImage
KHDR           := $(KOBJ)/usr/include
KSTOCK_SRC     := $(BUILD)/kernel-stock/src
KSTOCK_OBJ     := $(BUILD)/kernel-stock/obj
KSTOCK_BZIMAGE := $(KSTOCK_OBJ)/arch/x86/boot/bzImage

# _kernel_quiet is set by targets whose stdout is not about the kernel
# (vm-run); as a target-specific variable it reaches this prerequisite.
_kernel_env = BUILD='$(BUILD)' KERNEL_TARBALL='$(KERNEL_TARBALL)' NPROC='$(NPROC)' \
	KBUILD_VERBOSE='$(if $(filter 1,$(V)),1,0)' KERNEL_QUIET='$(_kernel_quiet)'

.PHONY: kernel kernel-stock kernel-config kernel-clean kernel-stock-clean _kernel-force

# The image files are the real targets: their recipe always runs (the script
# is incremental) and rules that depend on $(BZIMAGE) rebuild only when the
# image actually changed.  Phony rules can depend on `kernel` instead.
kernel: $(BZIMAGE)
kernel-stock: $(KSTOCK_BZIMAGE)

$(BZIMAGE): _kernel-force
	+@$(_kernel_env) $(TOP)/scripts/kernel/build
$(KSTOCK_BZIMAGE): _kernel-force
	+@$(_kernel_env) $(TOP)/scripts/kernel/build --stock
_kernel-force:

# Re-check that the fragment's options are what .config has.
kernel-config:
	@$(TOP)/scripts/kernel/check-config $(KOBJ)/.config $(KERNEL_FRAGMENT) && \
		echo "kernel-config: every option in kernel/config.fragment is set in $(KOBJ)/.config"

kernel-clean:
	rm -rf $(BUILD)/kernel

kernel-stock-clean:
	rm -rf $(BUILD)/kernel-stock
