/* e2e test program: a worker thread burns CPU in the library while the
 * main thread waits for it.
 *
 *   threads [CPU_MS]
 *
 * Prints "tid <worker's thread id>" once the worker runs, then runs until
 * the worker has used CPU_MS milliseconds of CPU time (default 1000). */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

int e2e_lib_hot(int n);  /* libe2e.so */

static double ms = 1000;

static double thread_cpu_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static void *worker(void *arg)
{
	double end = thread_cpu_ms() + ms;
	long s = 0;

	(void)arg;
	printf("tid %d\n", gettid());
	fflush(stdout);
	while (thread_cpu_ms() < end)
		s += e2e_lib_hot(20000);
	return (void *)s;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc > 1)
		ms = atof(argv[1]);
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	pthread_join(t, NULL);
	return 0;
}
