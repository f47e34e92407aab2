/* e2e test program: JIT code, named only by its perf map.
 *
 *   jit CPU_MS
 *
 * Copies a hot loop into two pages of anonymous memory (mapped read-write,
 * then made read-execute: the kernel reports the executable mapping as
 * "//anon"), and writes its own /tmp/perf-PID.map as a JIT does:
 *
 *   <page 0> 100 e2e_jit_named            the copy in page 0
 *   a line that is not one                (skipped and counted)
 *   <e2e_main_hot> 40 e2e_jit_wrong_file  an address of this program's own
 *                                         file-backed code: never to be used
 *
 * The copy in page 1 has no line.  It runs the three (page 0, page 1,
 * e2e_main_hot in its own text) in turn for CPU_MS of CPU time and a floor
 * of rounds (budget.h), and until another process has read the map (an
 * inotify watch on it sees an open for reading closed: IN_CLOSE_NOWRITE;
 * the file is written under another name and renamed into place, so what
 * is read is whole).  Then it deletes the
 * map and exits: only a copy taken while it ran can name the code.  If no
 * one reads the map within 300 s of wall time it fails (exit 3).
 *
 *   jit CPU_MS symlink
 *
 * Writes the map to /tmp/perf-PID.map.target and makes /tmp/perf-PID.map a
 * symlink to it, runs the copy in page 0 alone for CPU_MS and a floor of
 * rounds, and exits leaving both (the caller removes them): a profiler
 * must refuse the symlink, at the latest when it reads the map at the
 * process's exit.
 *
 * With E2E_GO_FILE set it first runs hot in the same code, map written,
 * until that file exists (at most 300 s, then it fails): a test attaches
 * a profiler to the running process (-p) and then says go. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

#define COPY_BYTES 256

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Copied as bytes: no calls, no globals, only jumps within itself. */
__attribute__((noinline, aligned(64))) long jit_template(long n)
{
	long s = 0;
	for (long i = 0; i < n; i++)
		s += (i * 7) ^ (s >> 3);
	return s;
}

__attribute__((noinline)) long e2e_main_hot(long n)
{
	volatile long s = 0;
	for (long i = 0; i < n; i++)
		s += i * 7;
	return s;
}

int main(int argc, char **argv)
{
	double ms = argc > 1 ? atof(argv[1]) : 500;
	int symlinked = argc > 2 && strcmp(argv[2], "symlink") == 0;
	long page = sysconf(_SC_PAGESIZE);
	char path[64], tmp[80];
	typedef long (*hot_fn)(long);
	hot_fn named, unnamed;
	unsigned char *code;
	FILE *f;
	int in, seen = 0;
	long s = 0;
	struct budget b;
	double give_up;

	code = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (code == MAP_FAILED) {
		perror("jit: mmap");
		return 2;
	}
	memcpy(code, (const void *)jit_template, COPY_BYTES);
	memcpy(code + page, (const void *)jit_template, COPY_BYTES);
	if (mprotect(code, 2 * page, PROT_READ | PROT_EXEC) != 0) {
		perror("jit: mprotect");
		return 2;
	}
	__builtin___clear_cache((char *)code, (char *)code + 2 * page);
	named = (hot_fn)(uintptr_t)code;
	unnamed = (hot_fn)(uintptr_t)(code + page);

	snprintf(path, sizeof(path), "/tmp/perf-%d.map", (int)getpid());
	snprintf(tmp, sizeof(tmp), "%s.%s", path, symlinked ? "target" : "new");
	f = fopen(tmp, "w");
	if (f == NULL) {
		perror("jit: fopen");
		return 2;
	}
	fprintf(f, "%lx 100 e2e_jit_named\n", (unsigned long)(uintptr_t)code);
	fprintf(f, "this is not a perf map line\n");
	fprintf(f, "%lx 40 e2e_jit_wrong_file\n", (unsigned long)(uintptr_t)e2e_main_hot);
	if (fclose(f) != 0 || (symlinked ? symlink(tmp, path) : rename(tmp, path)) != 0) {
		perror("jit: writing the map");
		return 2;
	}
	if (symlinked) {
		/* Only the JIT code, so that every sample of the loop is in it:
		 * with e2e_main_hot beside it, a capture in a TCG guest on a
		 * busy host once took 12 samples of the loop, all in
		 * e2e_main_hot, and the test had no JIT sample to look at.
		 * Twice the rounds per ms: a round is half as long. */
		budget_start(&b, "jit symlink", CLOCK_PROCESS_CPUTIME_ID, ms, 0.6);
		while (budget_more(&b))
			s += named(200000);
		printf("jit: pid %d, code at %p, map is a symlink to %s\n", (int)getpid(),
		       (void *)code, tmp);
		return s == 42;
	}
	in = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (in < 0 && errno == ENOSYS) {
		fprintf(stderr, "jit: no inotify in this kernel: cannot tell when the map was read\n");
		unlink(path);
		return 4;
	}
	if (in < 0 || inotify_add_watch(in, path, IN_CLOSE_NOWRITE) < 0) {
		perror("jit: inotify");
		return 2;
	}

	if (getenv("E2E_GO_FILE")) {
		const char *go = getenv("E2E_GO_FILE");
		double go_give_up = wall_s() + 300;

		while (access(go, F_OK) != 0) {
			char buf[4096] __attribute__((aligned(8)));

			if (wall_s() > go_give_up) {
				fprintf(stderr, "jit: %s never appeared\n", go);
				unlink(path);
				return 3;
			}
			s += named(200000);
			s += unnamed(200000);
			s += e2e_main_hot(200000);
			if (!seen && read(in, buf, sizeof(buf)) > 0)
				seen = 1;
		}
	}
	budget_start(&b, "jit", CLOCK_PROCESS_CPUTIME_ID, ms, 0.3);
	give_up = wall_s() + 300;
	while (budget_more(&b) || !seen) {
		char buf[4096] __attribute__((aligned(8)));

		if (wall_s() > give_up) {
			fprintf(stderr, "jit: no one read %s within 300 s\n", path);
			unlink(path);
			return 3;
		}
		s += named(200000);
		s += unnamed(200000);
		s += e2e_main_hot(200000);
		if (!seen && read(in, buf, sizeof(buf)) > 0)
			seen = 1;
	}
	unlink(path);
	printf("jit: pid %d, code at %p, map read and deleted\n", (int)getpid(), (void *)code);
	return s == 42;
}
