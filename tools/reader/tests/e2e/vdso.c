/* e2e test program: spends its time in the vDSO (clock_gettime).
 *
 *   vdso [CALLS [CPU_MS]]   (defaults 5,000,000 and 0)
 *
 * At least CALLS calls and CPU_MS ms of CPU time (budget.h): where a call
 * is cheap (the TSC read in a few nanoseconds), CALLS alone gives a
 * capture only a few dozen samples in the vDSO. */
#include <stdlib.h>
#include <time.h>

#include "budget.h"

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 5000000;
	double ms = argc > 2 ? atof(argv[2]) : 0;
	struct timespec t;
	struct budget b;
	long s = 0;

	/* Rounds of 10,000 calls, as many as CALLS makes, then more until
	 * the CPU time is spent. */
	budget_start(&b, "vdso", CLOCK_PROCESS_CPUTIME_ID, ms, 0);
	b.floor = (calls + 9999) / 10000;
	while (budget_more(&b)) {
		for (int i = 0; i < 10000; i++) {
			clock_gettime(CLOCK_MONOTONIC, &t);
			s += t.tv_nsec;
		}
	}
	return s == 42;
}
