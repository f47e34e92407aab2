/* e2e program for the startup timing test: a process that maps another
 * version of its library over the one it runs, at a moment the test picks.
 *
 *   remap V2_SO CPU_MS
 *
 * Runs libe2e's hot loop (the version it was started with, v1) and prints
 * "ready"; on SIGUSR1 it runs CPU_MS more milliseconds of CPU time in that
 * version, maps V2_SO's code over the library's (MAP_FIXED: the versions
 * have the same layout, their names differ only in a digit), prints
 * "remapped", runs CPU_MS milliseconds of CPU time in v2 (each with a
 * floor of work: budget.h), prints "done" and keeps v2 mapped until
 * SIGUSR2, so that a recorder can read what is mapped for as long as it
 * needs (CPU time is no measure of how far the recorder
 * got: in a guest on a loaded host, a vCPU's stolen time counts as the
 * process's).  It waits for each signal 60 s at most. */
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

int e2e_lib_hot(int n);

static volatile sig_atomic_t go, leave;

static void on_usr1(int sig)
{
	(void)sig;
	go = 1;
}

static void on_usr2(int sig)
{
	(void)sig;
	leave = 1;
}

static double ms_of(clockid_t clock)
{
	struct timespec ts;
	clock_gettime(clock, &ts);
	return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU milliseconds and a floor of work (budget.h) in the library. */
static int burn(double cpu)
{
	struct budget b;
	int s = 0;

	budget_start(&b, "remap", CLOCK_PROCESS_CPUTIME_ID, cpu, 6);
	while (budget_more(&b))
		s += e2e_lib_hot(20000);
	return s;
}

int main(int argc, char **argv)
{
	char line[4096];
	unsigned long start = 0, end = 0, off = 0;
	double deadline;
	FILE *maps;
	sigset_t usr2, unblocked;
	int fd, s = 0;

	if (argc != 3)
		return 2;
	signal(SIGUSR1, on_usr1);
	signal(SIGUSR2, on_usr2);
	/* Blocked except inside sigsuspend(), so it cannot come between the
	 * check of `leave` and the wait. */
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	sigprocmask(SIG_BLOCK, &usr2, &unblocked);
	sigdelset(&unblocked, SIGUSR2);
	maps = fopen("/proc/self/maps", "r");
	while (maps && fgets(line, sizeof(line), maps)) {
		if (strstr(line, "libe2e.so") && strstr(line, " r-xp ")) {
			sscanf(line, "%lx-%lx r-xp %lx", &start, &end, &off);
			break;
		}
	}
	if (maps)
		fclose(maps);
	fd = open(argv[1], O_RDONLY | O_CLOEXEC);
	if (!start || fd < 0) {
		fprintf(stderr, "remap: no libe2e.so code mapping or no %s\n", argv[1]);
		return 1;
	}
	printf("ready\n");
	fflush(stdout);
	deadline = ms_of(CLOCK_MONOTONIC) + 60000;
	while (!go && ms_of(CLOCK_MONOTONIC) < deadline)
		s += e2e_lib_hot(20000);
	if (!go) {
		fprintf(stderr, "remap: no SIGUSR1 within 60 s\n");
		return 1;
	}
	s += burn(atof(argv[2]));
	if (mmap((void *)start, end - start, PROT_READ | PROT_EXEC, MAP_PRIVATE | MAP_FIXED, fd,
		 (off_t)off) == MAP_FAILED) {
		perror("remap: mmap");
		return 1;
	}
	printf("remapped\n");
	fflush(stdout);
	s += burn(atof(argv[2]));
	printf("done\n");
	fflush(stdout);
	/* The alarm bounds the wait: SIGALRM ends the process. */
	alarm(60);
	while (!leave)
		sigsuspend(&unblocked);
	return s == 42;
}
