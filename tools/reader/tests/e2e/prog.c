/* e2e test program: burns CPU in functions with known names, in the
 * executable and in a shared library.
 *
 *   prog [CPU_MS [HOLD_FILE]]
 *
 * Runs until it has used CPU_MS milliseconds of CPU time (default 500) and
 * done a floor of work (budget.h), so the number of samples it gets does
 * not depend on how loaded the machine is.  With HOLD_FILE it then keeps
 * running, idle and with its mappings in place, until that file exists (at
 * most 60 s): a test uses it to keep a mapping alive until the profiler has
 * copied the mapped file.
 *
 * With E2E_GO_FILE set in the environment it first runs hot, in the same
 * functions, until that file exists (at most 300 s, then it fails): the
 * CPU_MS budget starts only once a test has seen the profiler ready. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

int e2e_lib_hot(int n);  /* libe2e.so; its name varies per library version */

__attribute__((noinline)) int e2e_main_hot(int n)
{
	volatile int s = 0;
	for (int i = 0; i < n; i++)
		s += i * 7;
	return s;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

int main(int argc, char **argv)
{
	double ms = argc > 1 ? atof(argv[1]) : 500;
	const char *go = getenv("E2E_GO_FILE");
	struct budget b;
	int s = 0;

	if (go) {
		double give_up = wall_s() + 300;

		while (access(go, F_OK) != 0) {
			if (wall_s() > give_up) {
				fprintf(stderr, "prog: %s never appeared\n", go);
				return 3;
			}
			s += e2e_main_hot(20000);
			s += e2e_lib_hot(20000);
		}
	}
	budget_start(&b, "prog", CLOCK_PROCESS_CPUTIME_ID, ms, 3);
	while (budget_more(&b)) {
		s += e2e_main_hot(20000);
		s += e2e_lib_hot(20000);
	}
	if (argc > 2) {
		for (int i = 0; i < 6000 && access(argv[2], F_OK) != 0; i++)
			usleep(10000);
	}
	return s == 42;
}
