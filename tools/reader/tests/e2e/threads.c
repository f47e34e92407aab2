/* e2e test program: a worker thread burns CPU in the library while the
 * main thread waits for it.
 *
 *   threads [CPU_MS [leader-exits [FILE]]]
 *
 * Prints "tid <worker's thread id>" once the worker runs, then runs until
 * the worker has used CPU_MS milliseconds of CPU time (default 1000) and
 * done a floor of work (budget.h).
 *
 * With "leader-exits" the main thread exits first (pthread_exit), leaving a
 * zombie leader beside the live worker, and "tid" is printed only once the
 * leader is a zombie; the process exits with the worker.  With FILE too,
 * the worker maps FILE executable for each 50 ms of its CPU time (and a
 * floor of work) and then unmaps it: new mappings made by a process whose
 * leader has exited.
 *
 * With E2E_GO_FILE set in the environment the worker, after printing its
 * id, runs hot in the library (mapping nothing) until that file exists (at
 * most 300 s, then the process fails); the CPU_MS budget starts then.
 *
 * With FILE and E2E_HOLD_FILE set, the worker then maps FILE once more,
 * prints "held", and keeps it mapped (running hot) until E2E_HOLD_FILE
 * exists: a mapping that a test knows is there while it asks the
 * recorder to take what the kernel wrote about it. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

int e2e_lib_hot(int n);  /* libe2e.so */

static double ms = 1000;
static int leader_exits;
static const char *map_path;

/* The state letter of the process's main thread, from /proc/self/stat. */
static char leader_state(void)
{
	char buf[512], *p;
	FILE *f = fopen("/proc/self/stat", "r");
	size_t n;

	if (!f)
		return '?';
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = '\0';
	p = strrchr(buf, ')');  /* the command name may hold anything */
	return p && p[1] == ' ' ? p[2] : '?';
}

/* Runs hot until `path` exists; at most 300 s, then the process fails. */
static long hot_until(const char *path)
{
	time_t give_up = time(NULL) + 300;
	long s = 0;

	while (access(path, F_OK) != 0) {
		if (time(NULL) > give_up) {
			fprintf(stderr, "threads: %s never appeared\n", path);
			exit(3);
		}
		s += e2e_lib_hot(20000);
	}
	return s;
}

/* Maps the whole of `path` executable; exits on failure. */
static void *map_file(const char *path, long *size)
{
	int fd = open(path, O_RDONLY);
	void *p = MAP_FAILED;

	*size = fd < 0 ? -1 : lseek(fd, 0, SEEK_END);
	if (*size > 0)
		p = mmap(NULL, *size, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED) {
		perror(path);
		exit(1);
	}
	close(fd);
	return p;
}

static void *worker(void *arg)
{
	struct budget b, chunk;
	long s = 0;
	int i;

	(void)arg;
	for (i = 0; leader_exits && leader_state() != 'Z'; i++) {
		if (i == 60000) {  /* 60 s at least */
			fprintf(stderr, "threads: the main thread did not exit\n");
			exit(1);
		}
		usleep(1000);
	}
	printf("tid %d\n", gettid());
	fflush(stdout);
	if (getenv("E2E_GO_FILE"))
		s += hot_until(getenv("E2E_GO_FILE"));
	budget_start(&b, "worker", CLOCK_THREAD_CPUTIME_ID, ms, 5);
	while (!budget_spent(&b)) {
		void *p = MAP_FAILED;
		long size = 0;

		if (map_path)
			p = map_file(map_path, &size);
		budget_start(&chunk, NULL, CLOCK_THREAD_CPUTIME_ID, 50, 5);
		while (budget_more(&chunk) && budget_more(&b))
			s += e2e_lib_hot(20000);
		if (p != MAP_FAILED)
			munmap(p, size);
	}
	if (map_path && getenv("E2E_HOLD_FILE")) {
		long size;
		void *p = map_file(map_path, &size);

		printf("held\n");
		fflush(stdout);
		s += hot_until(getenv("E2E_HOLD_FILE"));
		munmap(p, size);
	}
	return (void *)s;
}

int main(int argc, char **argv)
{
	pthread_t t;

	if (argc > 1)
		ms = atof(argv[1]);
	leader_exits = argc > 2 && !strcmp(argv[2], "leader-exits");
	if (argc > 3)
		map_path = argv[3];
	if (pthread_create(&t, NULL, worker, NULL) != 0)
		return 1;
	if (leader_exits)
		pthread_exit(NULL);
	pthread_join(t, NULL);
	return 0;
}
