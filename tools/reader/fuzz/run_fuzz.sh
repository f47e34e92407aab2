#!/bin/sh
# Runs each libFuzzer harness for FUZZ_SECONDS (make fuzz), one after the
# other, and prints what each did: executions, coverage, corpus.  A crash, a
# sanitizer report, a hang (> FUZZ_TIMEOUT s on one input), a leak or an
# out-of-memory input is a bug: its input is copied to
# tools/reader/fuzz/regressions/<harness>/, where make reader-test replays
# it, and the run fails after the last harness.
#
# The corpus a run grows is kept in BUILD/corpus/<harness> for the next run;
# the seeds (make_corpus.sh) are read from BUILD/seeds/<harness>.
#
# Usage: run_fuzz.sh BUILD REGRESSIONS [HARNESS...]
set -u
build=$1 regressions=$2
shift 2
harnesses=${*:-perf_data records elf}
seconds=${FUZZ_SECONDS:-120}
timeout=${FUZZ_TIMEOUT:-10}
failed=

for h in $harnesses; do
	bin=$build/mmap3_fuzz_$h
	corpus=$build/corpus/$h
	artifacts=$build/artifacts/$h
	log=$build/fuzz-$h.log
	mkdir -p "$corpus" "$artifacts"
	rm -f "$artifacts"/*
	dirs="$corpus $build/seeds/$h"
	[ -d "$regressions/$h" ] && dirs="$dirs $regressions/$h"
	echo "== fuzz $h: ${seconds}s (log: $log)"
	# shellcheck disable=SC2086 # the corpus directories are separate words
	"$bin" -max_total_time="$seconds" -timeout="$timeout" -print_final_stats=1 \
		-artifact_prefix="$artifacts/" $dirs >"$log" 2>&1
	rc=$?
	last=$(grep -E '^#[0-9]+' "$log" | tail -n 1)
	execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
	echo "   executions: ${execs:-?}; last status: ${last:-none}"
	found=$(ls "$artifacts" 2>/dev/null)
	if [ "$rc" -ne 0 ] || [ -n "$found" ]; then
		failed="$failed $h"
		grep -E '^(==[0-9]+==ERROR|SUMMARY|\*\*\* fuzz)' "$log" | head -n 5 | sed 's/^/   /'
		if [ -z "$found" ]; then
			echo "   error: $bin exited with status $rc and saved no input; see $log"
			continue
		fi
		mkdir -p "$regressions/$h"
		for f in $found; do
			cp "$artifacts/$f" "$regressions/$h/$f"
			echo "   saved $regressions/$h/$f"
		done
	fi
done

if [ -n "$failed" ]; then
	cat <<MSG

fuzz: FAILED:$failed.  Each input saved above is a bug in the reader.
  Reproduce:  $build/mmap3_fuzz_<harness> <input>
  Then fix the reader, keep the input (git add it under
  tools/reader/fuzz/regressions/<harness>/: make reader-test replays it),
  add a unit test that fails without the fix, and commit them together.
MSG
	exit 1
fi
echo "fuzz: no crash, hang or sanitizer report in $(echo "$harnesses" | wc -w) harnesses x ${seconds}s"
