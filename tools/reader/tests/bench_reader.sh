#!/bin/bash
# make bench-reader: the reader's benchmark, printed as a Markdown table.
#
#   READER_BIN   mmap3-reader (required); its build directory has
#                mmap3_reader_bench
#   BENCH_DIR    scratch directory (default build/reader-bench)
#   BENCH_RECORDS  records in the replayed capture (default 10,000,000; 1 or more)
#   BENCH_ROUNDS   rounds of each timing, each tool or build alternating
#                  (default 3; 1 or more)
#   BENCH_ONLY     "chains": only step 5 (make bench-reader-chains)
#   BENCH_BASE_READER  another build's mmap3-reader (its directory has its
#                  mmap3_reader_bench), e.g. main's: steps 1 (replay) and 5
#                  run it too, side by side, and 5 compares the folded output
#   BENCH_G_RECORDS  records of step 6's capture (default 6,000,000: 1,098 MiB;
#                  1 or more)
#
# 1. Replay: a perf.data file of BENCH_RECORDS records (mmap3_reader_bench
#    synth: 64 processes mapping libc, libstdc++, ld.so and the bench
#    program by MMAP2 + build-id, samples from two CPUs in FINISHED_ROUND
#    rounds on up to 16 hot instructions per function) through decoding,
#    timestamp ordering and attribution, in one thread: records/s per core,
#    best of BENCH_ROUNDS runs of best of 3 (alternating with
#    BENCH_BASE_READER's when set); records are views into the mapped file,
#    as in report, and again copied into the sorter, as the live capture
#    must.  The file is first dropped from the page cache (evict, below)
#    and read back by the replay's untimed first pass; when this run wrote
#    it, one replay before that gives the rate of the file as written.
# 2. Time to a symbolized report of the same file: `mmap3-reader report`
#    against `perf report --stdio --sort comm,dso,sym`, alternating, best of
#    BENCH_ROUNDS each (wall and CPU time).
# 3. Loss: `mmap3-reader record -a -F 10000` for 5 s on this machine's CPUs,
#    each kept busy by a spinning process: lost records and samples.
#    With BZIMAGE and VM_RUN set (make bench-reader does), the same again
#    in the patched guest, where the capture is in MMAP3 mode.
# 4. Startup: `record -a -F 1000 -m 1 -d 0.5` with 1,000 extra (sleeping)
#    processes, whose mappings are read after the events are enabled, and
#    every CPU kept busy, five times: seconds spent reading, records drained
#    meanwhile, lost records.  One page per CPU holds about 70 ms of
#    samples, so a reader that stalled before or while reading them (it
#    once read /proc/kallsyms there, 40 ms and more) loses records here.
#
# 5. Call chains: a perf.data file of BENCH_RECORDS records with perf
#    record -g's chains (mmap3_reader_bench synth-g: depth 16, 10,000
#    distinct chains over the same DSOs' functions, 64 processes) replayed
#    as report -g aggregates it: decoding, ordering, attribution of every
#    frame, stacks counted, in one thread: samples/s per core, as step 1
#    measures (the file read back, as written, and a copy of it written
#    in 1 MiB pieces just before); then `report -g --format folded` of it,
#    wall and CPU time, best of BENCH_ROUNDS (alternating with
#    BENCH_BASE_READER's when set).
#
# 6. `report -g` against `perf report -g --stdio` on one capture of more than
#    1 GiB with chains: time, totals, peak resident memory of each; and
#    `report -g --format folded` of it, its stacks' counts summed.
#
#   bench_reader.sh loss DIR   only step 3, into DIR; prints "samples
#                              samples/s/CPU lost-records lost-samples
#                              lost-per-event mode reader-cpu-seconds
#                              records-drained" (what the guest runs)
set -euo pipefail
READER_BIN=${READER_BIN:?READER_BIN must point at mmap3-reader}

# loss DIR: step 3; one line of numbers on stdout.
loss() {
	local dir=$1 cpus spinners=() rc=0 i records
	cpus=$(nproc)
	mkdir -p "$dir"
	echo "loss: $cpus CPUs" >&2  # the caller reads this from a guest's stderr
	for ((i = 0; i < cpus; i++)); do
		bash -c 'while :; do :; done' & spinners+=($!)
	done
	# The reader's own CPU time (user + system), from the shell's times.
	local TIMEFORMAT='%U %S' t
	t=$( { time "$READER_BIN" record -a -F 10000 -d 5 --no-buildid-cache -o "$dir/loss.data" \
		2>"$dir/loss.err"; } 2>&1) || rc=$?
	kill "${spinners[@]}"
	wait "${spinners[@]}" 2>/dev/null || true
	[ $rc -eq 0 ] || { cat "$dir/loss.err" >&2; echo "bench-reader: record -a failed ($rc)" >&2; return 1; }
	# "[ wrote FILE: N records (M drained from the ring buffers), B bytes ]"
	records=$(sed -n 's/^\[ wrote .* records (\([0-9]*\) drained from the ring buffers).*/\1/p' "$dir/loss.err")
	"$READER_BIN" report -i "$dir/loss.data" --format json | python3 -c '
import json, sys
c = json.load(sys.stdin)["capture"]
user, system = map(float, sys.argv[2].split())
records = int(sys.argv[3])
print(c["samples"], round(c["samples"] / 5 / int(sys.argv[1])), c["lost_records"], c["lost_samples"],
      c["event_lost"], c["mode"], "%.2f" % (user + system), records)' \
		"$cpus" "$(tail -n1 <<<"$t")" "${records:?no record count in $dir/loss.err}"
}
if [ "${1:-}" = loss ]; then
	loss "${2:?loss DIR}"
	exit
fi

BENCH=$(dirname "$READER_BIN")/mmap3_reader_bench
B=${BENCH_DIR:-$(cd "$(dirname "$READER_BIN")/.." && pwd)/reader-bench}
N=${BENCH_RECORDS:-10000000}
ROUNDS=${BENCH_ROUNDS:-3}
G=${BENCH_G_RECORDS:-6000000}
# Each timed row is a best of ROUNDS: with none there is nothing to print;
# a capture of no records has no rate.
for v in "RECORDS=$N" "ROUNDS=$ROUNDS" "G_RECORDS=$G"; do
	value=${v#*=}
	if [[ ! $value =~ ^[0-9]+$ ]] || ((10#$value == 0)); then
		echo "bench-reader: BENCH_${v%%=*} must be a whole number of 1 or more, not '$value'" >&2
		exit 2
	fi
done
N=$((10#$N)) ROUNDS=$((10#$ROUNDS)) G=$((10#$G))
# The base build's bench, beside its mmap3-reader (steps 1 and 5).
BASE_BENCH=
if [ -n "${BENCH_BASE_READER:-}" ]; then
	BASE_BENCH=$(dirname "$BENCH_BASE_READER")/mmap3_reader_bench
	[ -x "$BASE_BENCH" ] || { echo "bench-reader: no $BASE_BENCH" >&2; exit 1; }
fi
mkdir -p "$B"
data=$B/replay-$N.data
cpus=$(nproc)
cpu_model=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')

# secs CMD...: "wall cpu" seconds of one run, output to /dev/null
secs() {
	local t TIMEFORMAT='%R %U %S'
	t=$( { time "$@" >/dev/null 2>/dev/null; } 2>&1 | tail -n1)
	awk '{printf "%.2f %.2f\n", $1, $2 + $3}' <<<"$t"
}
best() { # best of a list of numbers
	tr ' ' '\n' | sort -g | head -n1
}
# stdin to stdout, and each line to stderr too, through the script's own
# descriptor: `tee /dev/stderr` opens the file anew, and when stderr is a
# log file that truncates it (a run's log kept only what came last).
also_stderr() {
	local line
	while IFS= read -r line; do
		printf '%s\n' "$line" >&2
		printf '%s\n' "$line"
	done
}
most() { # the largest of a list of numbers
	tr ' ' '\n' | sort -g | tail -n1
}
# evict FILE: its pages written back and dropped from the page cache, so
# that the next replay reads it from the disk, as a report of a capture
# recorded earlier does.  Replayed from the page cache as its writer left
# it, seconds after it was written, the chains' file once ran 10-15% slower
# (14.82 against 16.49 M samples/s, Xeon family 6 model 167, host kernel
# 6.18: read back, the file's page cache is in 2 MiB folios, which mmap
# maps whole; written in 1 MiB pieces, it was not).  Our writer now writes
# up to 2 MiB boundaries, which gives the same folios as a read back; the
# chains' step also times a copy written in 1 MiB pieces, as other writers
# leave a file.  The tables give each.
evict() {
	sync "$1" && dd if="$1" iflag=nocache count=0 status=none
}
# written_rate UNIT FILE [g]: the CPU-time rate of one `replay FILE 3 [g]`
# (best of 3) of the file as it is in the page cache now.
written_rate() {
	"$BENCH" replay "${@:2}" | also_stderr |
		sed -n "s/^best: .*; \([0-9.]*\) M $1\/s of CPU time.*/\1/p"
}

# rates UNIT FILE [g]: "rate cpu-rate [base-rate base-cpu-rate]", M UNIT/s
# of wall and CPU time: the best of BENCH_ROUNDS runs of this build's
# `mmap3_reader_bench replay FILE 3 [g]` (itself best of 3), alternating
# with BENCH_BASE_READER's bench when it is set.  One run of each build
# once put two builds 10% apart on the chains that alternating runs, in the
# same minutes, found equal.
rates() {
	local unit=$1 i r c base_bench=$BASE_BENCH rs=() cs=() brs=() bcs=()
	shift
	one() {
		"$1" replay "${@:2}" | also_stderr |
			sed -n "s/^best: \([0-9.]*\) M $unit\/s.*; \([0-9.]*\) M $unit\/s of CPU time.*/\1 \2/p"
	}
	for ((i = 0; i < ROUNDS; i++)); do
		read -r r c < <(one "$BENCH" "$@") || true
		[ -n "$c" ] || { echo "bench-reader: $BENCH replay $* gave no rate" >&2; return 1; }
		rs+=("$r") cs+=("$c")
		if [ -n "$base_bench" ]; then
			echo "the same with $BENCH_BASE_READER's build ..." >&2
			read -r r c < <(one "$base_bench" "$@") || true
			[ -n "$c" ] || { echo "bench-reader: $base_bench replay $* gave no rate" >&2; return 1; }
			brs+=("$r") bcs+=("$c")
		fi
	done
	echo "$(echo "${rs[@]}" | most) $(echo "${cs[@]}" | most)" \
		"${base_bench:+$(echo "${brs[@]}" | most) $(echo "${bcs[@]}" | most)}"
}

# Step 5; prints its table rows.  The capture is written by this build's
# bench and read by both builds' (perf.data is the same format).
chains() {
	local gdata=$B/chains-$N.data base_bench=$BASE_BENCH rate cpu_rate base_rate= base_cpu= folded stacks w c bw= bc= same= written= pieces=
	if [ ! -s "$gdata" ] || [ "$BENCH" -nt "$gdata" ]; then
		"$BENCH" synth-g "$gdata" "$N" 16 10000 >&2
		echo "call chains: replay of the file just written ..." >&2
		written=$(written_rate samples "$gdata" 3 g)
		echo "call chains: a copy written in 1 MiB pieces, replayed just after ..." >&2
		dd if="$gdata" of="$gdata.pieces" bs=1M conv=fsync status=none
		pieces=$(written_rate samples "$gdata.pieces" 3 g)
		rm -f "$gdata.pieces"
	fi
	evict "$gdata"
	echo "call chains: replay with stacks aggregated (report -g), one thread ..." >&2
	read -r rate cpu_rate base_rate base_cpu < <(rates samples "$gdata" 3 g)
	[ -n "$cpu_rate" ] && { [ -z "$base_bench" ] || [ -n "$base_cpu" ]; } || exit 1
	folded=$B/chains-$N.folded
	"$READER_BIN" report -g --format folded -i "$gdata" --buildid-dir "$B/no-cache" >"$folded"
	stacks=$(wc -l <"$folded")
	# Best of ROUNDS, alternating with the base build when there is one: a
	# single run each once showed 15% between two builds that alternating
	# runs found the same within 3%.
	local ws=() cs=() bws=() bcs=() i
	for ((i = 0; i < ROUNDS; i++)); do
		read -r w c < <(secs "$READER_BIN" report -g --format folded -i "$gdata" --buildid-dir "$B/no-cache")
		ws+=("$w") cs+=("$c")
		if [ -n "$base_bench" ]; then
			read -r bw bc < <(secs "$BENCH_BASE_READER" report -g --format folded -i "$gdata" \
				--buildid-dir "$B/no-cache")
			bws+=("$bw") bcs+=("$bc")
		fi
	done
	w=$(echo "${ws[@]}" | best) c=$(echo "${cs[@]}" | best)
	if [ -n "$base_bench" ]; then
		bw=$(echo "${bws[@]}" | best) bc=$(echo "${bcs[@]}" | best)
		if "$BENCH_BASE_READER" report -g --format folded -i "$gdata" --buildid-dir "$B/no-cache" |
			cmp -s - "$folded"; then same="the same output"; else same="**output differs**"; fi
	fi
	echo "| call stacks of $N records with \`-g\` chains, depth 16, 10,000 chains ($stacks folded stacks): decode, ordering, attribution of every frame, stacks counted, one core, the file read back from the disk | **$rate M samples/s** ($cpu_rate M per CPU-second)${base_rate:+; before: $base_rate M samples/s ($base_cpu M per CPU-second; alternating, best of $ROUNDS)} | >= 15 M samples/s |"
	echo "| the same, the file seconds after it was written (page cache as its writer left it), one run | ${written:-not measured: the file is from an earlier run}${written:+ M samples/s per CPU-second} | |"
	echo "| the same, a copy written in 1 MiB pieces seconds before (page cache as a writer of smaller or unaligned pieces leaves it), one run | ${pieces:-not measured: the file is from an earlier run}${pieces:+ M samples/s per CPU-second} | |"
	echo "| \`mmap3-reader report -g --format folded\` of that file (best of $ROUNDS${base_bench:+, alternating}) | $w s wall, $c s CPU${bw:+ (before: $bw s wall, $bc s CPU; $same)} | |"
}
# Step 6; prints its table rows: `report -g` against `perf report -g
# --stdio` on one capture of more than 1 GiB (BENCH_G_RECORDS chain
# samples, default 6,000,000: perf takes minutes on it), one run each:
# time, the same total, and each tool's peak resident memory.  The
# reader maps the file, so its peak counts the file's pages it has
# touched.
against_perf_g() {
	local n=$G data ours theirs folded ow oc om pw pc pm fw fc fm size
	data=$B/chains-$n.data
	if [ ! -s "$data" ] || [ "$BENCH" -nt "$data" ]; then
		"$BENCH" synth-g "$data" "$n" 16 10000 >&2
	fi
	size=$(du -m --apparent-size "$data" | cut -f1)
	# "wall cpu peak-MB" of one run
	measure() {
		/usr/bin/time -f '%e %U %S %M' -o "$B/time.out" "$@" >/dev/null 2>&1 ||
			{ echo "bench-reader: $* failed" >&2; return 1; }
		awk '{printf "%.2f %.2f %d\n", $1, $2 + $3, $4 / 1024}' "$B/time.out"
	}
	# Both tools meet the file in the page cache: read once first (a run
	# that found it evicted timed this reader's disk reads, 2.94 s against
	# 0.65, and perf's report then found it cached).
	cat "$data" >/dev/null
	echo "report -g of $data ($size MiB), this reader ..." >&2
	read -r ow oc om < <(measure "$READER_BIN" report -g -i "$data" --buildid-dir "$B/no-cache")
	echo "perf report -g --stdio of it (minutes) ..." >&2
	read -r pw pc pm < <(measure perf report -g --stdio -i "$data")
	echo "report -g --format folded of it, this reader ..." >&2
	read -r fw fc fm < <(measure "$READER_BIN" report -g --format folded -i "$data" --buildid-dir "$B/no-cache")
	# The folded stacks' counts, summed: every sample is on one stack.
	folded=$("$READER_BIN" report -g --format folded -i "$data" --buildid-dir "$B/no-cache" |
		awk '{s += $NF} END {print s + 0}')
	ours=$("$READER_BIN" report -i "$data" --buildid-dir "$B/no-cache" --format json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["capture"]["samples"])')
	theirs=$(perf report -i "$data" --stdio --no-children -g none --sort comm -F overhead,sample,comm 2>/dev/null |
		awk '/^ *[0-9.]+%/ {s += $2} END {print s}')
	echo "| \`mmap3-reader report -g\` of a $size MiB capture ($n records, chains of depth 16; $ours samples, perf counts $theirs) | $ow s wall, $oc s CPU, peak resident $om MiB | |"
	echo "| \`perf report -g --stdio\` of that file | $pw s wall, $pc s CPU, peak resident $pm MiB | |"
	echo "| \`report -g\` speed-up over perf | **$(awk -v a="$pw" -v b="$ow" 'BEGIN {printf "%.0f", a / b}')x** wall, $(awk -v a="$pc" -v b="$oc" 'BEGIN {printf "%.0f", a / b}')x CPU | >= 20x |"
	echo "| \`mmap3-reader report -g --format folded\` of that file ($folded samples on its stacks) | $fw s wall, $fc s CPU, peak resident $fm MiB: **$(awk -v a="$pw" -v b="$fw" 'BEGIN {printf "%.0f", a / b}')x** perf's wall time | >= 20x |"
}

if [ "${BENCH_ONLY:-}" = chains ]; then
	rows=$(chains)
	cat <<EOT

$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $cpus CPUs ($cpu_model), load average $(cut -d' ' -f1-3 /proc/loadavg)${BENCH_BASE_READER:+; before: $BENCH_BASE_READER}

| measurement | result | target |
|---|---|---|
$rows
EOT
	exit
fi

written=
if [ ! -s "$data" ] || [ "$BENCH" -nt "$data" ]; then
	"$BENCH" synth "$data" "$N" 16 >&2
	echo "replay of the file just written ..." >&2
	written=$(written_rate records "$data" 3)
fi
evict "$data"

echo "replay (decode, ordering, attribution; one thread) ..." >&2
# "best: W M records/s ... (...; C M records/s of CPU time)": wall and CPU
read -r replay replay_cpu base_replay base_replay_cpu < <(rates records "$data" 3)
[ -n "$replay_cpu" ] && { [ -z "${BENCH_BASE_READER:-}" ] || [ -n "$base_replay_cpu" ]; } || exit 1
replay_copy=$("$BENCH" replay "$data" 3 copy | also_stderr | sed -n 's/^best: \([0-9.]*\) M.*/\1/p')

rw=() rc=() pw=() pc=()
for ((i = 0; i < ROUNDS; i++)); do
	echo "report round $((i + 1))/$ROUNDS ..." >&2
	read -r w c < <(secs "$READER_BIN" report -i "$data" --buildid-dir "$B/no-cache")
	rw+=("$w") rc+=("$c")
	read -r w c < <(secs perf report -i "$data" --stdio --no-children --sort comm,dso,sym)
	pw+=("$w") pc+=("$c")
done
rw=$(echo "${rw[@]}" | best) rc=$(echo "${rc[@]}" | best)
pw=$(echo "${pw[@]}" | best) pc=$(echo "${pc[@]}" | best)
# The same samples: the totals of both reports.
ours=$("$READER_BIN" report -i "$data" --buildid-dir "$B/no-cache" --format json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["capture"]["samples"])')
theirs=$(perf report -i "$data" --stdio --no-children --sort comm -F overhead,sample,comm 2>/dev/null |
	awk '/^ *[0-9.]+%/ {s += $2} END {print s}')

echo "loss: record -a -F 10000 for 5 s, $cpus CPUs busy ..." >&2
host_loss=$(loss "$B")
read -r lsamples lrate lrec lsam levent mode lcpu lrecords <<<"$host_loss"
if [ -n "${BZIMAGE:-}" ]; then
	echo "loss in the patched guest (MMAP3) ..." >&2
	gdir=$B/guest-loss
	rm -rf "$gdir" && mkdir -p "$gdir"
	"$VM_RUN" --kernel "$BZIMAGE" --timeout 300 --env READER_BIN="$READER_BIN" -- \
		"$0" loss /tmp/bench-loss >"$gdir/out" 2>"$gdir/err" ||
		{ cat "$gdir/err" "$gdir/out" >&2; echo "bench-reader: the guest loss run failed" >&2; exit 1; }
	# The guest's stderr and stdout arrive together.
	read -r gsamples grate grec gsam gevent gmode gcpu grecords < <(grep -v '^loss: ' "$gdir/out" | tail -n1)
	gcpus=$(awk '/^loss: [0-9]+ CPUs$/ {print $2}' "$gdir/out" "$gdir/err")
fi

echo "startup: record -a -m 1 with 1000 extra processes, $cpus CPUs busy, 5 runs ..." >&2
sleepers=()
# (|| true: under set -e a failing trap, kill of an emptied list, would be
# the script's exit status)
trap 'kill "${sleepers[@]}" 2>/dev/null || true' EXIT
for ((i = 0; i < 1000; i++)); do sleep 600 & sleepers+=($!); done
for ((i = 0; i < cpus; i++)); do bash -c 'while :; do :; done' & sleepers+=($!); done
startup=()
for ((i = 0; i < 5; i++)); do
	"$READER_BIN" record -q -a -F 1000 -m 1 -d 0.5 --no-buildid-cache -o "$B/startup.data"
	startup+=("$("$READER_BIN" report -i "$B/startup.data" --format json | python3 -c '
import json, sys
c = json.load(sys.stdin)["capture"]; s = c["startup"]
print("%d %.2f %d %d" % (s["processes"], s["seconds"], s["records_drained"], c["lost_records"]))')")
done
kill "${sleepers[@]}"
wait "${sleepers[@]}" 2>/dev/null || true
sleepers=()
# "processes seconds drained lost" per run -> the table cell
chain_rows=$(chains)
perf_g_rows=$(against_perf_g)

startup_cell=$(printf '%s\n' "${startup[@]}" | awk '
	{ p = $1; s = s sep $2; d = d sep $3; l = l sep $4; sep = ", " }
	END { printf "%d processes; read in %s s; drained %s; **lost %s**", p, s, d, l }')

ratio() { awk -v a="$1" -v b="$2" 'BEGIN {printf "%.1f", a / b}'; }
cat <<EOT

$(date -u '+%Y-%m-%d %H:%M UTC'), $(uname -r), $cpus CPUs ($cpu_model), load average $(cut -d' ' -f1-3 /proc/loadavg)${BENCH_BASE_READER:+; before: $BENCH_BASE_READER}

| measurement | result | target |
|---|---|---|
| replay of $N records (decode, ordering, attribution), one core, the file read back from the disk | **$replay M records/s** ($replay_cpu per CPU-second)${base_replay:+ (before: $base_replay M records/s, $base_replay_cpu per CPU-second; alternating, best of $ROUNDS)} | >= 50 M records/s |
| the same, the file seconds after it was written (page cache as its writer left it), one run | ${written:-not measured: the file is from an earlier run}${written:+ M records/s per CPU-second} | |
| the same, each record copied into the sorter as a live capture does | $replay_copy M records/s | |
| symbolized report of those samples ($ours; perf counts $theirs): \`mmap3-reader report\` | $rw s wall, $rc s CPU | |
| the same with \`perf report --stdio --sort comm,dso,sym\` (perf $(perf version 2>/dev/null | awk '{print $3}')) | $pw s wall, $pc s CPU | |
| report speed-up over perf (best of $ROUNDS each, alternating) | **$(ratio "$pw" "$rw")x** wall, $(ratio "$pc" "$rc")x CPU | >= 10x |
| \`record -a -F 10000\`, 5 s, $cpus CPUs busy, this host ($mode): samples (per CPU per s), lost records, lost samples, lost (per event) | $lsamples ($lrate), **$lrec, $lsam, $levent** | zero lost |
| the reader's own CPU time (user + system) in that capture to a file | $lcpu s for $lrecords records drained: **$(awk -v c="$lcpu" -v n="$lrecords" 'BEGIN {printf "%.2f", c / (n / 1e6)}') s per million records** | |
EOT
if [ -n "${BZIMAGE:-}" ]; then
	echo "| the same in the patched 6.1.192 guest, $gcpus vCPUs under TCG ($gmode) | $gsamples ($grate), **$grec, $gsam, $gevent**; reader CPU $gcpu s for $grecords records | zero lost |"
fi
cat <<EOT
| \`record -a -F 1000 -m 1\` with 1,000 extra processes at startup, $cpus CPUs busy, 5 runs: processes, seconds reading their mappings, records drained meanwhile, lost records | $startup_cell | zero lost |
$chain_rows
$perf_g_rows
EOT
