# The QEMU test bench: boot the mmap3 kernel with the host's / shared
# read-only over 9p and run one command in it.  scripts/vm/run does the work
# (see its header for the guest environment and the output protocol).
#
#   make vm-run CMD='uname -a; exit 3'     patched kernel (build/kernel)
#   make vm-run-stock CMD='...'            unpatched baseline (build/kernel-stock)
#   make vm-run VM_KERNEL=stock CMD='...'  the same
#   make vm-run VM_KERNEL=distro CMD='...' Debian's own 6.1 kernel, unpatched
#                                          (build/distro-kernel, fetched, not built)
#
# Settings: VM_TIMEOUT (s, default 900), VM_ACCEL (tcg; kvm hangs on some
# hosts), VM_MEM (2G), VM_SMP (2), VM_CONSOLE=1 (show the kernel console),
# VM_APPEND (more kernel command line), VM_9P_CACHE (loose).
#
# make cannot exit with the command's status (a failing recipe makes it exit
# 2), so vm-run prints the status and leaves it in build/vm/last-status;
# scripts that need the number call $(VM_RUN) directly, which exits with it:
#   $(VM_RUN) -- ./my_test --gtest_brief=1
#   $(VM_RUN) --stock --timeout 300 -- 'cd /tmp && ./bench'

VM_DIR       := $(BUILD)/vm
VM_INITRAMFS := $(VM_DIR)/initramfs.cpio.gz
VM_BUSYBOX   ?= /bin/busybox
VM_RUN       := $(TOP)/scripts/vm/run
VM_KERNEL    ?= patched
VM_TIMEOUT   ?= 900
VM_ACCEL     ?= tcg
VM_MEM       ?= 2G
VM_SMP       ?= 2
VM_CONSOLE   ?= 0
VM_APPEND    ?=
VM_9P_CACHE  ?= loose
export VM_TIMEOUT VM_ACCEL VM_MEM VM_SMP VM_CONSOLE VM_APPEND VM_9P_CACHE VM_BUSYBOX

DISTRO_KERNEL := $(BUILD)/distro-kernel/vmlinuz

.PHONY: initramfs vm-run vm-run-stock vm-clean distro-kernel

initramfs: $(VM_INITRAMFS)

# (wildcard: a missing busybox gets mkinitramfs's "run make deps", not make's
# "no rule to make target")
$(VM_INITRAMFS): $(TOP)/scripts/vm/init $(TOP)/scripts/vm/mkinitramfs $(wildcard $(VM_BUSYBOX))
	@$(TOP)/scripts/vm/mkinitramfs $@ $(VM_BUSYBOX)

# Debian's linux-image of linux-source-6.1's version, from the package
# archive (scripts/vm/distro-kernel): the stock kernel of the reader's
# stock-guest tests, with no build.  The script does nothing when the
# unpacked copy is of that version already.
distro-kernel: $(DISTRO_KERNEL)
$(DISTRO_KERNEL): _distro-kernel-force
	@$(TOP)/scripts/vm/distro-kernel $(BUILD)/distro-kernel
_distro-kernel-force:
.PHONY: _distro-kernel-force

# The command goes through a file, never through the shell: $(value CMD) is
# the text exactly as given, whatever quoting or $ it holds.
# cmd.<pid of this make>, so concurrent makes do not collide.
_vm_cmd_file = $(VM_DIR)/cmd.$(shell echo $$PPID)

# Checked before anything is built, not after the kernel prerequisite.
ifneq ($(filter vm-run vm-run-stock,$(MAKECMDGOALS)),)
ifeq ($(strip $(value CMD)),)
$(error vm-run needs a command: make vm-run CMD='uname -a')
endif
endif

define _vm_run
	@mkdir -p $(VM_DIR)
	$(file >$(_vm_cmd_file),$(value CMD))
	@rc=0; VM_QUIET=1 $(VM_RUN) --status-file $(VM_DIR)/last-status --kernel $(1) \
		--cmd-file $(_vm_cmd_file) || rc=$$?; \
	rm -f $(_vm_cmd_file); \
	if [ $$rc -ne 0 ]; then echo "$@: exit status $$rc" >&2; fi; \
	exit $$rc
endef

# Keep stdout for the guest command: the kernel build prerequisite runs make -s.
vm-run vm-run-stock: _kernel_quiet := 1

_vm_image = $(if $(filter stock,$(VM_KERNEL)),$(KSTOCK_BZIMAGE),$(if $(filter distro,$(VM_KERNEL)),$(DISTRO_KERNEL),$(BZIMAGE)))
vm-run: $(_vm_image) $(VM_INITRAMFS)
	$(call _vm_run,$(_vm_image))

vm-run-stock: $(KSTOCK_BZIMAGE) $(VM_INITRAMFS)
	$(call _vm_run,$(KSTOCK_BZIMAGE))

vm-clean:
	rm -rf $(VM_DIR)
