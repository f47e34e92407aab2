#!/bin/sh
# Builds the fuzzers' seed corpus from real inputs (make fuzz runs it):
#   OUT/perf_data  a capture by `mmap3-reader record -o` and one by
#                  `perf record` (each if it works here), and the synthetic
#                  capture of mmap3_fuzz_seeds
#   OUT/records    records encoded by record_writer (mmap3_fuzz_seeds)
#   OUT/elf        a shared library, an object file and a debug-only file built
#                  here, and a few small system ELF files
# Nothing here is committed: OUT is under build/.  A capture that cannot be
# made (no perf_event access, no perf) is skipped with a note; the synthetic
# seeds are always there.
#
# Usage: make_corpus.sh OUT READER_BIN SEEDS_BIN
set -eu
out=$1 reader=$2 seeds=$3
cc=${CC:-cc}
rm -rf "$out"
mkdir -p "$out/perf_data" "$out/records" "$out/elf" "$out/work"
work=$out/work

# A small library with a build-id and symbols, as the tests build theirs.
cat >"$work/seedlib.c" <<'C'
int seed_a(int x) { return x * 3 + 1; }
int seed_b(int x) { return seed_a(x) ^ 0x55; }
int seed_c(int x) { return seed_b(x) + seed_a(x + 1); }
C
"$cc" -O1 -g0 -fPIC -shared -Wl,--build-id=sha1 -o "$work/libseed.so" "$work/seedlib.c"
"$cc" -O1 -c -o "$out/elf/seedlib.o" "$work/seedlib.c"
cp "$work/libseed.so" "$out/elf/libseed.so"
objcopy --only-keep-debug "$work/libseed.so" "$out/elf/libseed.debug"
for f in /usr/bin/true /usr/lib/x86_64-linux-gnu/libz.so.1 /usr/lib/x86_64-linux-gnu/libdl.so.2; do
	[ -f "$f" ] && cp -L "$f" "$out/elf/$(basename "$f")"
done

"$seeds" "$out" "$work/libseed.so"

# A workload that runs a bounded amount of work, not for a time.
workload='i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done'
if "$reader" record -q -g -F 999 -o "$out/perf_data/mmap3-reader.data" -- sh -c "$workload" \
		>"$work/record.log" 2>&1; then
	echo "make_corpus: captured $out/perf_data/mmap3-reader.data"
else
	echo "make_corpus: note: mmap3-reader record failed here, no such seed ($(tail -n1 "$work/record.log"))"
	rm -f "$out/perf_data/mmap3-reader.data"
fi
if command -v perf >/dev/null 2>&1 &&
		perf record -q -g -F 999 -o "$out/perf_data/perf.data" -- sh -c "$workload" \
			>"$work/perf.log" 2>&1; then
	echo "make_corpus: captured $out/perf_data/perf.data"
else
	echo "make_corpus: note: perf record unavailable or failed here, no such seed"
	rm -f "$out/perf_data/perf.data"
fi
rm -rf "$work"
for d in perf_data records elf; do
	echo "make_corpus: $d: $(ls "$out/$d" | wc -l) seeds, $(du -sk "$out/$d" | cut -f1) KiB"
done
