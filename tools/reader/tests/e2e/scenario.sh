#!/bin/bash
# The replace-during-profile scenario, run under a profiler:
#
#   scenario.sh DIR CPU_MS [CACHE_DIR]
#
# DIR holds v1.so v2.so v3.so (libe2e.so versions), lib/libe2e.so (a copy of
# v1.so) and prog_a prog_b prog_c (e2e/prog.c linked against lib/libe2e.so).
#   A: prog_a maps v1;
#   the library is replaced by rename() with v2 (a new inode); B: prog_b maps it;
#   after A and B exit it is rewritten in place (same inode) with v3; C: prog_c.
# Each process burns CPU_MS of CPU time.  With CACHE_DIR (an mmap3-reader
# --buildid-dir), each process then stays alive until its version's file is in
# that cache, so the reader can copy it through /proc/PID/map_files.
#
# Nothing depends on timing: the rename waits until A has the library mapped
# (or has exited: it maps it when it starts), the rewrite until B has exited;
# every wait is bounded (60 s), and a process that fails fails the script.  Prints one line
# per process: "A <pid> <build-id of the file it mapped>".
set -eu
dir=$1 ms=$2 cache=${3:-}
lib=$dir/lib/libe2e.so

build_id() { # FILE: the GNU build-id note in hex
	readelf -n "$1" | sed -n 's/^ *Build ID: *\([0-9a-f]*\).*/\1/p'
}
hold_file() { # FILE: the cache entry of FILE's build-id, or nothing
	[ -n "$cache" ] || return 0
	local id
	id=$(build_id "$1")
	echo "$cache/.build-id/${id:0:2}/${id:2}/elf"
}
wait_mapped() { # PID
	local i
	for ((i = 0; i < 1200; i++)); do
		grep -q libe2e.so "/proc/$1/maps" 2>/dev/null && return 0
		# Gone already (this shell can be starved longer than the
		# process runs on a busy guest): linked against libe2e.so, it
		# mapped it when it started; the wait below checks its status.
		kill -0 "$1" 2>/dev/null || return 0
		sleep 0.05
	done
	echo "scenario: process $1 never mapped libe2e.so" >&2
	return 1
}

"$dir/prog_a" "$ms" $(hold_file "$dir/v1.so") & a=$!
wait_mapped $a
echo "A $a $(build_id "$dir/v1.so")"
cp "$dir/v2.so" "$lib.new"
mv "$lib.new" "$lib"
"$dir/prog_b" "$ms" $(hold_file "$dir/v2.so") & b=$!
wait_mapped $b
echo "B $b $(build_id "$dir/v2.so")"
wait $a $b
cat "$dir/v3.so" >"$lib"
"$dir/prog_c" "$ms" $(hold_file "$dir/v3.so") & c=$!
echo "C $c $(build_id "$dir/v3.so")"
wait $c
