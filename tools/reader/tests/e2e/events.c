/* e2e test program for record's -e, -c, -C and -t: CPU time and page
 * faults in functions with known names.
 *
 *   events spin CPU_MS      e2e_spin_hot until CPU_MS ms of CPU time
 *   events faults CPU_MS    e2e_spin_hot and e2e_fault_hot (maps 64 fresh
 *                           pages, writes one byte in each, unmaps them)
 *                           in turn, CPU_MS ms of CPU time in all, the
 *                           spin each time at least as long as the faults
 *                           before it
 *   events threads CPU_MS   two threads, one in e2e_thread_a_hot, one in
 *                           e2e_thread_b_hot, each for CPU_MS ms of its
 *                           own CPU time; the main thread only waits.
 *                           Prints "tids A B" once both run.
 *
 * With E2E_GO_FILE set in the environment the hot functions run until that
 * file exists (at most 300 s, then the process fails) before the CPU_MS
 * budget starts: a test starts a recorder, sees it ready, then says go.
 * Times are CPU time, never wall time, with a floor of work (budget.h): a
 * loaded machine takes longer, the samples stay where they are. */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

static volatile unsigned long sink;

__attribute__((noinline)) void e2e_spin_hot(int n)
{
	unsigned long s = sink;
	int i;

	for (i = 0; i < n; i++)
		s = s * 2862933555777941757UL + 3037000493UL;
	sink = s;
}

__attribute__((noinline)) void e2e_fault_hot(void)
{
	const long page = sysconf(_SC_PAGESIZE);
	char *p = mmap(NULL, 64 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	int i;

	if (p == MAP_FAILED) {
		perror("mmap");
		exit(1);
	}
	for (i = 0; i < 64; i++)
		((volatile char *)p)[i * page] = (char)i;  /* a fault per page */
	munmap(p, 64 * page);
}

/* Each thread's loop is its own: a sample is on the function of the
 * thread it was taken in. */
__attribute__((noinline)) void e2e_thread_a_hot(int n)
{
	unsigned long s = sink;
	int i;

	for (i = 0; i < n; i++)
		s = s * 6364136223846793005UL + 1442695040888963407UL;
	sink = s;
}

__attribute__((noinline)) void e2e_thread_b_hot(int n)
{
	unsigned long s = sink;
	int i;

	for (i = 0; i < n; i++)
		s = s * 3935559000370003845UL + 2691343689449507681UL;
	sink = s;
}

/* Runs `hot` until E2E_GO_FILE exists (if set). */
static void wait_for_go(void (*hot)(int))
{
	const char *go = getenv("E2E_GO_FILE");
	time_t give_up = time(NULL) + 300;

	while (go && access(go, F_OK) != 0) {
		if (time(NULL) > give_up) {
			fprintf(stderr, "events: %s never appeared\n", go);
			exit(3);
		}
		hot(20000);
	}
}

static double ms = 300;
static int running;
static pid_t tids[2];

struct thread_arg {
	void (*hot)(int);
	int index;
};

static void *thread_main(void *arg)
{
	const struct thread_arg *t = arg;
	void (*hot)(int) = t->hot;
	struct budget b;

	tids[t->index] = gettid();
	__atomic_add_fetch(&running, 1, __ATOMIC_SEQ_CST);
	wait_for_go(hot);
	budget_start(&b, t->index ? "thread b" : "thread a", CLOCK_THREAD_CPUTIME_ID, ms, 10);
	while (budget_more(&b))
		hot(20000);
	return NULL;
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		fprintf(stderr, "usage: events spin|faults|threads [CPU_MS]\n");
		return 2;
	}
	if (argc > 2)
		ms = atof(argv[2]);
	if (!strcmp(argv[1], "spin")) {
		struct budget b;

		wait_for_go(e2e_spin_hot);
		budget_start(&b, "spin", CLOCK_THREAD_CPUTIME_ID, ms, 10);
		while (budget_more(&b))
			e2e_spin_hot(20000);
	} else if (!strcmp(argv[1], "faults")) {
		struct budget b;
		double fault_ms = 0, until, t0;

		wait_for_go(e2e_spin_hot);
		budget_start(&b, "faults", CLOCK_THREAD_CPUTIME_ID, ms, 0.3);
		while (budget_more(&b)) {
			/* The spin takes at least the CPU time that the
			 * faults before it took of the clock (capped at 20
			 * ms): at least about half of the samples are the
			 * spin's, whatever a page fault costs here (in a
			 * guest whose host pages for it, 64 of them cost
			 * several times the fixed spin that came first). */
			until = budget_now_ms(CLOCK_THREAD_CPUTIME_ID) + fault_ms;
			do
				e2e_spin_hot(200000);
			while (budget_now_ms(CLOCK_THREAD_CPUTIME_ID) < until);
			t0 = budget_now_ms(CLOCK_MONOTONIC);
			e2e_fault_hot();
			fault_ms = budget_now_ms(CLOCK_MONOTONIC) - t0;
			if (fault_ms > 20)
				fault_ms = 20;
		}
	} else if (!strcmp(argv[1], "threads")) {
		static struct thread_arg args[2] = {{e2e_thread_a_hot, 0}, {e2e_thread_b_hot, 1}};
		pthread_t a, b;

		if (pthread_create(&a, NULL, thread_main, &args[0]) != 0 ||
		    pthread_create(&b, NULL, thread_main, &args[1]) != 0)
			return 1;
		while (__atomic_load_n(&running, __ATOMIC_SEQ_CST) < 2)
			usleep(1000);
		printf("tids %d %d\n", tids[0], tids[1]);
		fflush(stdout);
		pthread_join(a, NULL);
		pthread_join(b, NULL);
	} else {
		fprintf(stderr, "events: unknown mode %s\n", argv[1]);
		return 2;
	}
	return 0;
}
