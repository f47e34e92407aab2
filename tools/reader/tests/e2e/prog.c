/* e2e test program: burns CPU in functions with known names, in the
 * executable and in a shared library, for argv[1] milliseconds. */
#include <stdlib.h>
#include <time.h>

int e2e_lib_hot(int n);  /* libe2e.so; its name varies per library version */

static double now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

__attribute__((noinline)) int e2e_main_hot(int n)
{
	volatile int s = 0;
	for (int i = 0; i < n; i++)
		s += i * 7;
	return s;
}

int main(int argc, char **argv)
{
	double ms = argc > 1 ? atof(argv[1]) : 500;
	double end = now_ms() + ms;
	int s = 0;

	while (now_ms() < end) {
		s += e2e_main_hot(20000);
		s += e2e_lib_hot(20000);
	}
	return s == 42;
}
