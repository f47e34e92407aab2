# perf from the patched source tree (build/kernel/src, the whole series
# applied, tools/perf patches included), built out of tree.
#
#   make perf         build/perf/perf
#   make perf-test    the replace-during-profile scenario in the patched
#                     guest, recorded with mmap3-reader and with this perf's
#                     own perf record (MMAP3 records, synthesized ones read
#                     through map_files), then read by this perf with no
#                     inject step; Debian's perf on the reader's file is
#                     checked to get it wrong, and on Debian's kernel perf
#                     record falls back to MMAP2 and refuses --mmap3
#   make perf-test-full  all of perf test, with this perf and with perf built
#                     the same way from the unpatched tree (build/perf-stock),
#                     on the patched and the stock kernel, Debian's perf
#                     beside them; fails on any test whose result the series
#                     changes (not in make test: about 15 minutes under TCG)
#
# The build is kept to what reading and recording need: libelf (symbols,
# build IDs) and zlib; no scripting, TUI/GTK, DWARF unwinding, BPF, libnuma,
# libcrypto, babeltrace, zstd/lzma, libcap, JVMTI, SDT or the PMU event
# tables.  It runs niced with at most PERF_JOBS (2) jobs: the machine's other
# test runs are timed.  PERF_SRC=<a tools tree> builds another tree (a
# development worktree) into PERF_OBJ.

PERF_SRC  ?= $(KSRC)
PERF_OBJ  ?= $(BUILD)/perf
PERF_BIN  := $(PERF_OBJ)/perf
PERF_JOBS ?= $(shell n=$(NPROC); echo $$(( n < 2 ? n : 2 )))
PERF_FEATURES_OFF := NO_LIBPYTHON=1 NO_LIBPERL=1 NO_SLANG=1 NO_GTK2=1 \
	NO_LIBUNWIND=1 NO_LIBDW_DWARF_UNWIND=1 NO_DWARF=1 NO_LIBBPF=1 \
	NO_LIBAUDIT=1 NO_LIBNUMA=1 NO_LIBCRYPTO=1 NO_LIBBABELTRACE=1 \
	NO_LIBZSTD=1 NO_LZMA=1 NO_LIBCAP=1 NO_JVMTI=1 NO_SDT=1 \
	NO_LIBDEBUGINFOD=1 NO_LIBPFM4=1 NO_JEVENTS=1 NO_DEMANGLE=1
_perf_make = nice -n 19 $(MAKE) -s -j$(PERF_JOBS) -C $(PERF_SRC)/tools/perf \
	O=$(PERF_OBJ) $(PERF_FEATURES_OFF) WERROR=1

.PHONY: perf perf-stock perf-test perf-test-full perf-clean

# kernel-source only when building the series' own tree
perf: deps $(if $(filter $(KSRC),$(PERF_SRC)),kernel-source)
	@mkdir -p $(PERF_OBJ)
	+@$(_perf_make)
	@echo "perf: $(PERF_BIN) ($$($(PERF_BIN) version))"

perf-clean:
	rm -rf $(PERF_OBJ)

# Part of make test (scripts/test/all).  Two guest boots: the patched kernel
# and Debian's (the fallback to MMAP2).
perf-test: deps $(READER_BUILD)/CMakeCache.txt
	@$(MAKE) -s perf $(BZIMAGE) $(VM_INITRAMFS) $(DISTRO_KERNEL)
	@nice -n 19 cmake --build $(READER_BUILD) -j$(READER_JOBS) --target mmap3-reader >/dev/null
	@PERF_BIN=$(PERF_BIN) READER_BIN=$(READER_BIN) BZIMAGE=$(BZIMAGE) \
		DISTRO_KERNEL=$(DISTRO_KERNEL) PERF_SRC=$(PERF_SRC) $(TOP)/scripts/test/perf-mmap3

# perf of the unpatched tree, built the same way
PERF_STOCK_OBJ := $(BUILD)/perf-stock
perf-stock: deps $(KSTOCK_BZIMAGE)
	@$(MAKE) -s perf PERF_SRC=$(KSTOCK_SRC) PERF_OBJ=$(PERF_STOCK_OBJ)

perf-test-full: deps
	@$(MAKE) -s perf perf-stock $(BZIMAGE) $(KSTOCK_BZIMAGE) $(VM_INITRAMFS)
	@PERF_BIN=$(PERF_BIN) PERF_STOCK_BIN=$(PERF_STOCK_OBJ)/perf BZIMAGE=$(BZIMAGE) \
		KSTOCK_BZIMAGE=$(KSTOCK_BZIMAGE) PERF_SRC=$(PERF_SRC) PERF_STOCK_SRC=$(KSTOCK_SRC) \
		$(TOP)/scripts/test/perf-test-full
