# Combines `mmap3-opcost --raw` lines prefixed with the kernel
# ("KERNEL<TAB>operation<TAB>mode<TAB>ns", several boots of each kernel) into
# the README's table: the median over boots, and the ratios that matter.
# Usage: awk -F'\t' -v boots=N -f opcost-table.awk RAW
function median(key,    n, i, j, t, v) {
	n = split(vals[key], v, " ")
	for (i = 1; i <= n; i++)
		for (j = i + 1; j <= n; j++)
			if (v[j] + 0 < v[i] + 0) {
				t = v[i]; v[i] = v[j]; v[j] = t
			}
	return v[int((n + 1) / 2)] + 0
}
{
	vals[$1 SUBSEP $2 SUBSEP $3] = vals[$1 SUBSEP $2 SUBSEP $3] " " $4
	if (!($2 in seen)) {
		seen[$2] = 1
		opname[++nops] = $2
	}
}
END {
	print "| operation | stock, no event | patched, no event | patched / stock | patched, MMAP2 | patched, MMAP2+build_id | patched, MMAP3 | MMAP3 / MMAP2+build_id |"
	print "|---|---|---|---|---|---|---|---|"
	for (o = 1; o <= nops; o++) {
		op = opname[o]
		s0 = median("stock" SUBSEP op SUBSEP "no event")
		p0 = median("patched" SUBSEP op SUBSEP "no event")
		p2 = median("patched" SUBSEP op SUBSEP "MMAP2")
		pb = median("patched" SUBSEP op SUBSEP "MMAP2+build_id")
		p3 = median("patched" SUBSEP op SUBSEP "MMAP3")
		printf "| %s | %d | %d | %.2f | %d | %d | %d | %.2f |\n", op, s0, p0,
		       s0 ? p0 / s0 : 0, p2, pb, p3, pb ? p3 / pb : 0
	}
	printf "\nns per operation: for each kernel the median over %d boots (alternating\n", boots
	printf "stock and patched) of each boot's median of 8 interleaved rounds\n"
}
