// SPDX-License-Identifier: GPL-2.0
/*
 * tsc-khz: the rate of this machine's TSC in kHz, measured against
 * CLOCK_MONOTONIC_RAW over 200 ms, for scripts/vm/run: under TCG the
 * guest's TSC is this one (QEMU reads the host's), and a guest that
 * calibrates it at boot on a busy host can get it wrong by a factor of
 * ten (its PIT calibration, taken over HPET's when the two disagree).
 * Preemption cannot skew it: each end is the pair of reads, of 20, with
 * the fewest TSC ticks around the clock's read, and the 200 ms between
 * the ends may be as long as it likes.
 */
#include <stdint.h>
#include <stdio.h>
#include <time.h>
#include <x86intrin.h>

/* The TSC and the clock read together, in ticks and nanoseconds. */
static void read_both(uint64_t *tsc, double *clock_ns)
{
	uint64_t best = UINT64_MAX;
	int i;

	for (i = 0; i < 20; i++) {
		struct timespec t;
		uint64_t before = __rdtsc(), after;

		clock_gettime(CLOCK_MONOTONIC_RAW, &t);
		after = __rdtsc();
		if (after - before < best) {
			best = after - before;
			*tsc = before + best / 2;
			*clock_ns = t.tv_sec * 1e9 + t.tv_nsec;
		}
	}
}

int main(void)
{
	const struct timespec wait = { 0, 200000000 };
	uint64_t tsc0, tsc1;
	double ns0, ns1;

	read_both(&tsc0, &ns0);
	nanosleep(&wait, NULL);
	read_both(&tsc1, &ns1);
	if (ns1 <= ns0 || tsc1 <= tsc0)
		return 1;
	printf("%.0f\n", (double)(tsc1 - tsc0) / (ns1 - ns0) * 1e6);
	return 0;
}
