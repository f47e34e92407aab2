# Shared by scripts/kernel/*: sourced, not run.
#
# Everything here is about the one kernel the series targets.  Changing the
# target version means changing KERNEL_WANT_* and nothing else.

KERNEL_WANT_VERSION=6
KERNEL_WANT_PATCHLEVEL=1
KERNEL_WANT_SUBLEVEL=192
KERNEL_WANT="$KERNEL_WANT_VERSION.$KERNEL_WANT_PATCHLEVEL.$KERNEL_WANT_SUBLEVEL"

: "${KERNEL_TARBALL:=/usr/src/linux-source-6.1.tar.xz}"
: "${KERNEL_ARCH:=x86_64}"

# The tag on the unpatched import in build/kernel/src; the series goes on top.
KERNEL_BASE_TAG=mmap3-base

# Kconfig and Kbuild read a lot from the environment.  A variable set for the
# top-level make (make V=1 CMD=... M=...) must not leak into the kernel's own
# make: the wrong M= or O= silently builds something else.
kernel_clean_env() {
	unset MAKEFLAGS MFLAGS MAKELEVEL MAKEOVERRIDES GNUMAKEFLAGS MAKEFILES
	unset O M KBUILD_OUTPUT KBUILD_EXTMOD ARCH SUBARCH CROSS_COMPILE LLVM
	unset KCONFIG_CONFIG KCONFIG_ALLCONFIG KCFLAGS KCPPFLAGS KAFLAGS
	unset LOCALVERSION INSTALL_HDR_PATH INSTALL_MOD_PATH
	export LC_ALL=C
}

note() { printf '%s: %s\n' "${prog:-kernel}" "$*" >&2; }

die() {
	printf '%s: error: %s\n' "${prog:-kernel}" "$1" >&2
	shift
	local line
	for line in "$@"; do
		printf '%s:        %s\n' "${prog:-kernel}" "$line" >&2
	done
	exit 1
}

# kernel_make SRC OBJ TARGET...: the kernel's make, out of tree, for our arch.
kernel_make() {
	local src=$1 obj=$2
	shift 2
	make -C "$src" O="$obj" ARCH="$KERNEL_ARCH" "$@"
}

# free_mb DIR: megabytes free on the file system holding DIR.
free_mb() {
	local dir=$1
	while [[ ! -d $dir ]]; do dir=$(dirname "$dir"); done
	df -Pk -- "$dir" | awk 'NR == 2 { print int($4 / 1024) }'
}

# enough_space DIR: false (and the size free in $free_text) under 3 GB.
enough_space() {
	local mb
	mb=$(free_mb "$1")
	free_text="$((mb / 1024)).$(((mb % 1024) * 10 / 1024)) GB"
	((mb >= 3 * 1024))
}

# kernel_source_version DIR: "6.1.192" from DIR/Makefile ("?" for a missing field).
kernel_source_version() {
	awk -F= '
		function val(s) { gsub(/[ \t]/, "", s); return s == "" ? "?" : s }
		$1 ~ /^VERSION[ \t]*$/    && v == "" { v = val($2) }
		$1 ~ /^PATCHLEVEL[ \t]*$/ && p == "" { p = val($2) }
		$1 ~ /^SUBLEVEL[ \t]*$/   && s == "" { s = val($2) }
		END { printf "%s.%s.%s\n", v == "" ? "?" : v, p == "" ? "?" : p, s == "" ? "?" : s }
	' "$1/Makefile" 2>/dev/null || echo "?.?.?"
}

# check_kernel_version DIR: refuse anything but the version the series targets.
check_kernel_version() {
	local dir=$1 found
	[[ -f $dir/Makefile ]] ||
		die "$dir has no Makefile: $KERNEL_TARBALL is not a kernel source tarball" \
		    "reinstall it: apt-get install --reinstall linux-source-6.1"
	found=$(kernel_source_version "$dir")
	[[ $found == "$KERNEL_WANT" ]] ||
		die "$KERNEL_TARBALL holds Linux $found, but the mmap3 series is for Linux $KERNEL_WANT" \
		    "(its Makefile says VERSION/PATCHLEVEL/SUBLEVEL = ${found//./\/})." \
		    "Install the matching source: apt-get install linux-source-6.1=$KERNEL_WANT-*" \
		    "(apt-cache policy linux-source-6.1 lists the versions on offer), or set" \
		    "KERNEL_TARBALL=/path/to/linux-$KERNEL_WANT.tar.xz.  Porting the series to" \
		    "Linux $found means rebasing kernel-patches/ and changing KERNEL_WANT_* in" \
		    "scripts/kernel/lib.sh."
}

# series_patches PATCHDIR: the patch file names from PATCHDIR/series, in order.
# quilt syntax: one patch per line, '#' starts a comment, options after the
# name (-p1) are ignored.
series_patches() {
	local series=$1/series
	[[ -f $series ]] || return 0
	sed -e 's/#.*//' "$series" | awk 'NF { print $1 }'
}

# series_sha PATCHDIR: changes whenever the series file or any patch changes.
series_sha() {
	(
		cd "$1" 2>/dev/null || { echo none; exit 0; }
		echo "series-v1"
		if [[ -f series ]]; then sha256sum series; fi
		for f in *.patch; do
			if [[ -f $f ]]; then sha256sum "$f"; fi
		done
	) | sha256sum | cut -c1-64
}
