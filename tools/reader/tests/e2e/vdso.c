/* e2e test program: spends its time in the vDSO (clock_gettime).
 *
 *   vdso [CALLS]   (default 5,000,000) */
#include <stdlib.h>
#include <time.h>

int main(int argc, char **argv)
{
	long calls = argc > 1 ? atol(argv[1]) : 5000000;
	struct timespec t;
	long s = 0;

	for (long i = 0; i < calls; i++) {
		clock_gettime(CLOCK_MONOTONIC, &t);
		s += t.tv_nsec;
	}
	return s == 42;
}
