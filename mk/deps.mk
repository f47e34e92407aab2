# Debian packages the build needs.  `make deps` installs the missing ones
# (apt-get, as root) and leaves a stamp so the next call costs nothing; the
# stamp is redone whenever this file changes.  Two make commands at once on
# a new machine take turns (flock on /var/lib/mmap3-deps, a directory only
# root can create or open, so no other user can plant or hold the lock; the
# second then installs only what is still missing), and apt-get waits for
# another apt or dpkg holding its locks instead of failing at once.
# scripts/test/deps-test (a stage of make test) checks both, with stubs of
# apt-get and dpkg-query.
#
#   DEPS_KERNEL  kernel build, initramfs and QEMU bench (mk/kernel.mk, mk/vm.mk);
#                trinity, the syscall fuzzer make vm-trinity runs in the guest
#   DEPS_READER  tools/reader and the selftests (clang and its libFuzzer
#                runtime for make fuzz; libfuse3-dev for selftests/fuse_backing;
#                protobuf-compiler, libprotobuf-dev, zlib1g-dev for report
#                --format pprof; golang-go for go tool pprof in the e2e test;
#                libdebuginfod-dev for report's debuginfod client, debuginfod
#                for the server its e2e test runs; lld for the PLT test of
#                lld-linked files)
#   DEPS_PERF    make perf (mk/perf.mk): tools/perf of the patched tree, built
#                with libelf and zlib only; python3 runs its build scripts;
#                linux-perf is Debian's perf, which make perf-test compares

DEPS_KERNEL := linux-source-6.1 qemu-system-x86 busybox-static flex bison bc libelf-dev cpio xz-utils build-essential libssl-dev kmod git trinity
DEPS_READER := cmake g++ pkg-config binutils lld make libgtest-dev libelf-dev liburing-dev libbpf-dev nlohmann-json3-dev libcli11-dev libfmt-dev linux-perf clang libclang-rt-14-dev libfuse3-dev protobuf-compiler libprotobuf-dev zlib1g-dev golang-go libdebuginfod-dev debuginfod

DEPS_PERF   := build-essential flex bison pkg-config python3 libelf-dev zlib1g-dev linux-perf

DEPS       := $(sort $(DEPS_KERNEL) $(DEPS_READER) $(DEPS_PERF))
DEPS_STAMP := $(BUILD)/deps.stamp

.PHONY: deps
deps: $(DEPS_STAMP)

$(DEPS_STAMP): $(TOP)/mk/deps.mk
	@rm -f $@; mkdir -p $(@D); \
	missing_now() { \
		for p in $(DEPS); do \
			dpkg-query -W -f='$${Status}\n' "$$p" 2>/dev/null | grep -q '^install ok installed$$' || \
				printf ' %s' "$$p"; \
		done; \
	}; \
	missing=$$(missing_now); \
	if [ -n "$$missing" ]; then \
		echo "deps: missing Debian packages:$$missing"; \
		if [ "$$(id -u)" != 0 ]; then \
			echo "deps: error: installing them needs root; run as root (or: sudo apt-get install$$missing)" >&2; \
			exit 1; \
		fi; \
		if ! command -v apt-get >/dev/null; then \
			echo "deps: error: no apt-get here; install by hand:$$missing" >&2; \
			exit 1; \
		fi; \
		mkdir -p -m 700 /var/lib/mmap3-deps && exec 9</var/lib/mmap3-deps || exit 1; \
		if ! flock -w 1800 9; then \
			echo "deps: error: another make deps has held /var/lib/mmap3-deps locked for 30 min" >&2; \
			exit 1; \
		fi; \
		missing=$$(missing_now); \
	fi; \
	if [ -n "$$missing" ]; then \
		echo "deps: apt-get update && apt-get install$$missing"; \
		export DEBIAN_FRONTEND=noninteractive; \
		tries=0; \
		until LC_ALL=C apt-get update -q >$(@D)/deps-update.log 2>&1 9<&-; do \
			tries=$$((tries + 1)); \
			if ! grep -q 'Could not get lock' $(@D)/deps-update.log || [ $$tries -ge 90 ]; then \
				cat $(@D)/deps-update.log >&2; \
				echo "deps: error: apt-get update failed (network? sources.list? another apt holding its lock?)" >&2; \
				exit 1; \
			fi; \
			echo "deps: another apt holds its lists lock; waiting for it"; \
			sleep 10; \
		done; \
		cat $(@D)/deps-update.log; \
		if ! apt-get -o DPkg::Lock::Timeout=900 install -y -q --no-install-recommends $$missing 9<&-; then \
			echo "deps: error: apt-get install failed for:$$missing" >&2; \
			echo "deps:        'apt-cache policy <package>' shows whether a package is available" >&2; \
			exit 1; \
		fi; \
	fi; \
	mkdir -p $(@D) && touch $@ && echo "deps: all $(words $(DEPS)) packages installed"
