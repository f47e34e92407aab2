# Combines `mmap3-opcost --raw` lines prefixed with the kernel and the boot
# ("KERNEL<TAB>BOOT<TAB>operation<TAB>mode<TAB>ns", several boots of each
# kernel) into the README's tables: the median over boots, the ratios that
# matter, and how far boots of one kernel were apart.  The first kernel is
# the baseline (stock); the others are patched kernels.
# Usage: awk -F'\t' -v boots=N -v rounds=N -v batch=MS -v icount=SPEC \
#            -f opcost-table.awk RAW
function sorted(key, v,    n, i, j, t) {
	n = split(vals[key], v, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (v[j] + 0 < v[i] + 0) {
				t = v[i]; v[i] = v[j]; v[j] = t
			}
	return n
}
function median(k, op, mode,    v, n) {
	n = sorted(k SUBSEP op SUBSEP mode, v)
	return n ? v[int((n + 1) / 2)] + 0 : 0
}
function ratio(a, b) {
	return b ? sprintf("%.3f", a / b) : "-"
}
function num(x) {
	return x ? sprintf("%d", x) : "-"
}
{
	key = $1 SUBSEP $3 SUBSEP $4
	vals[key] = vals[key] " " $5
	if (!($1 in kseen)) {
		kseen[$1] = 1
		kname[++nk] = $1
	}
	if (!($3 in seen)) {
		seen[$3] = 1
		opname[++nops] = $3
	}
}
END {
	base = kname[1]
	printf "No event (the patched paths idle), ns/op:\n\n| operation | %s |", base
	for (k = 2; k <= nk; k++)
		printf " %s | %s / %s |", kname[k], kname[k], base
	printf "\n|---|---|"
	for (k = 2; k <= nk; k++)
		printf "---|---|"
	printf "\n"
	for (o = 1; o <= nops; o++) {
		op = opname[o]
		b = median(base, op, "no event")
		printf "| %s | %s |", op, num(b)
		for (k = 2; k <= nk; k++) {
			p = median(kname[k], op, "no event")
			printf " %s | %s |", num(p), ratio(p, b)
		}
		printf "\n"
	}
	for (k = 2; k <= nk; k++) {
		K = kname[k]
		printf "\n%s with an event, ns/op:\n\n", K
		printf "| operation | MMAP2 | MMAP2+build_id | MMAP3 | MMAP3 / MMAP2+build_id | MMAP3 / no event |\n"
		printf "|---|---|---|---|---|---|\n"
		for (o = 1; o <= nops; o++) {
			op = opname[o]
			p0 = median(K, op, "no event")
			p2 = median(K, op, "MMAP2")
			pb = median(K, op, "MMAP2+build_id")
			p3 = median(K, op, "MMAP3")
			printf "| %s | %s | %s | %s | %s | %s |\n", op, num(p2), num(pb),
			       num(p3), ratio(p3, pb), ratio(p3, p0)
		}
	}
	if (nk >= 3) {
		printf "\nMMAP3 event, ns/op, patched kernels side by side:\n\n| operation |"
		for (k = 2; k <= nk; k++)
			printf " %s |", kname[k]
		for (k = 3; k <= nk; k++)
			printf " %s / %s |", kname[k], kname[2]
		printf "\n|---|"
		for (k = 2; k <= nk; k++)
			printf "---|"
		for (k = 3; k <= nk; k++)
			printf "---|"
		printf "\n"
		for (o = 1; o <= nops; o++) {
			op = opname[o]
			printf "| %s |", op
			for (k = 2; k <= nk; k++)
				printf " %s |", num(median(kname[k], op, "MMAP3"))
			for (k = 3; k <= nk; k++)
				printf " %s |", ratio(median(kname[k], op, "MMAP3"),
						      median(kname[2], op, "MMAP3"))
			printf "\n"
		}
	}

	# How far apart the boots of one kernel were, (max - min) / median, by
	# kind of row: one thread; fork+exec (exec's layout is random); threads
	for (key in vals) {
		n = sorted(key, v)
		if (n < 2)
			continue
		m = v[int((n + 1) / 2)] + 0
		s = m ? (v[n] - v[1]) / m : 0
		split(key, parts, SUBSEP)
		c = parts[2] ~ /threads/ ? 3 : parts[2] ~ /fork/ ? 2 : 1
		if (s >= worst[c]) {
			worst[c] = s
			worst_key[c] = parts[1] ", " parts[2] ", " parts[3]
		}
	}
	cname[1] = "one thread"; cname[2] = "fork+exec"; cname[3] = "threads"
	printf "\n"
	if (icount != "")
		printf "Method: QEMU -icount %s, one vCPU: guest time counts guest\ninstructions (shift=0: 1 ns each), so host load is not in it.\n", icount
	else
		printf "Method: wall-clock QEMU TCG (host load is in it).\n"
	printf "ns/op: per kernel, the median over %d boots of\n", boots
	printf "each boot's median of %d interleaved rounds of at least %d ms per\n", rounds, batch
	printf "operation and mode; with N threads, the batch's elapsed time over the\n"
	printf "operations of all threads.\n"
	if (boots > 1) {
		printf "Largest spread between boots of one kernel, (max - min) / median:\n"
		for (c = 1; c <= 3; c++)
			if (c in worst_key)
				printf "  %s: %.2f%% (%s)\n", cname[c], 100 * worst[c], worst_key[c]
	}
}
