// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3-opcost: the cost per operation of mapping files, under each kind of
 * perf event that reports mappings.
 *
 *   mmap3-opcost [--rounds N] [--batch-ms MS] [--raw] --dso FILE DIR
 *
 * DIR is a writable directory (the guest's tmpfs) for the fixtures; FILE a
 * shared object to dlopen (copied into DIR).  Modes: no event, MMAP2,
 * MMAP2 + build_id and, where the kernel has it, MMAP3; each mode is an
 * event on this process, inherited by its children.  Operations: mmap +
 * munmap of an ELF with PROT_EXEC, dlopen + dlclose, fork + exec of a tiny
 * static ELF.  Rounds interleave the modes, starting each round with a
 * different one, so that drift and the kernel's deferred work after an
 * event closes (the build-id cache turns itself off a second later) hit
 * them alike; the table shows the median ns/op over rounds and ratios.
 *
 * Each timed batch repeats its operation until at least --batch-ms have
 * passed: the test guest's only clocksource is jiffies (TSC calibration
 * fails under TCG), so a batch must be long against a 4ms tick.
 *
 * --raw prints "operation<TAB>mode<TAB>ns" lines instead of the table, for
 * scripts/bench/kernel to combine runs on several boots.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "mmap3_util.h"

enum { MODE_NONE, MODE_MMAP2, MODE_MMAP2_BUILD_ID, MODE_MMAP3, NR_MODES };
enum { OP_MMAP, OP_DLOPEN, OP_FORK_EXEC, NR_OPS };

static const char *const mode_names[NR_MODES] = {
	"no event", "MMAP2", "MMAP2+build_id", "MMAP3",
};
static const unsigned int mode_flags[NR_MODES] = {
	0, EV_MMAP | EV_MMAP2, EV_MMAP | EV_MMAP2 | EV_BUILD_ID, EV_MMAP3,
};
static const char *const op_names[NR_OPS] = {
	"mmap+munmap PROT_EXEC", "dlopen+dlclose", "fork+exec",
};

static char elf_path[4096], dso_path[4096], exe_path[4096];

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int do_op(int op)
{
	switch (op) {
	case OP_MMAP: {
		int fd = open(elf_path, O_RDONLY | O_CLOEXEC);
		void *p;

		if (fd < 0)
			return -1;
		p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
		close(fd);
		if (p == MAP_FAILED)
			return -1;
		return munmap(p, 4096);
	}
	case OP_DLOPEN: {
		void *h = dlopen(dso_path, RTLD_NOW | RTLD_LOCAL);

		if (!h)
			return -1;
		return dlclose(h);
	}
	case OP_FORK_EXEC: {
		int status;
		pid_t pid = fork();

		if (pid < 0)
			return -1;
		if (!pid) {
			execl(exe_path, exe_path, (char *)NULL);
			_exit(127);
		}
		if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) ||
		    WEXITSTATUS(status))
			return -1;
		return 0;
	}
	}
	return -1;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static int copy_file(const char *from, const char *to)
{
	int in = open(from, O_RDONLY), out;
	struct stat st;
	ssize_t n;

	if (in < 0 || fstat(in, &st))
		return -1;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC, 0755);
	if (out < 0)
		return -1;
	n = sendfile(out, in, NULL, st.st_size);
	close(in);
	close(out);
	return n == st.st_size ? 0 : -1;
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "batch-ms", required_argument, NULL, 'b' },
		{ "dso", required_argument, NULL, 'd' },
		{ "raw", no_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int rounds = 8, batch_ms = 300, raw = 0, c, round, mode, op, nr_modes;
	double *samples[NR_MODES][NR_OPS], median[NR_MODES][NR_OPS];
	struct elf_spec lib = { .id_len = 20, .id_seed = 1, .size = 16384 };
	struct elf_spec exe = { .id_len = 20, .id_seed = 2, .executable = true };
	const char *dso = NULL, *dir;
	int err;

	while ((c = getopt_long(argc, argv, "r:b:d:", opts, NULL)) != -1) {
		if (c == 'r')
			rounds = atoi(optarg);
		else if (c == 'b')
			batch_ms = atoi(optarg);
		else if (c == 'd')
			dso = optarg;
		else if (c == 'R')
			raw = 1;
		else
			goto usage;
	}
	if (optind != argc - 1 || !dso || rounds < 1 || batch_ms < 1)
		goto usage;
	dir = argv[optind];
	snprintf(elf_path, sizeof(elf_path), "%s/bench-lib.so", dir);
	snprintf(exe_path, sizeof(exe_path), "%s/bench-exe", dir);
	snprintf(dso_path, sizeof(dso_path), "%s/bench-dso.so", dir);
	if ((err = elf_write(elf_path, &lib, false)) ||
	    (err = elf_write(exe_path, &exe, false))) {
		fprintf(stderr, "mmap3-opcost: writing fixtures in %s: %s\n", dir,
			strerror(-err));
		return 1;
	}
	if (copy_file(dso, dso_path)) {
		fprintf(stderr, "mmap3-opcost: copying %s: %s\n", dso, strerror(errno));
		return 1;
	}
	nr_modes = mmap3_supported() ? NR_MODES : MODE_MMAP3;

	for (mode = 0; mode < nr_modes; mode++)
		for (op = 0; op < NR_OPS; op++)
			samples[mode][op] = calloc(rounds, sizeof(double));

	for (round = 0; round < rounds; round++) {
		int m;

		for (m = 0; m < nr_modes; m++) {
			struct mmap3_events evs = { 0 };

			mode = (m + round) % nr_modes;
			if (mode_flags[mode]) {
				err = mmap3_open_cpus(&evs, 0, mode_flags[mode] | EV_INHERIT, 256);
				if (err) {
					fprintf(stderr, "mmap3-opcost: %s: %s\n",
						mode_names[mode], strerror(-err));
					return 1;
				}
			}
			for (op = 0; op < NR_OPS; op++) {
				double t0 = now_ns(), t;
				long n = 0;

				do {
					if (do_op(op)) {
						fprintf(stderr, "mmap3-opcost: %s failed: %s\n",
							op_names[op], strerror(errno));
						return 1;
					}
					n++;
					t = now_ns() - t0;
				} while (t < batch_ms * 1e6);
				samples[mode][op][round] = t / n;
				if (evs.n) {
					struct rec_list recs = { 0 };

					mmap3_collect_cpus(&evs, &recs);
					rec_list_free(&recs);
				}
			}
			mmap3_close_cpus(&evs);
		}
	}

	for (mode = 0; mode < nr_modes; mode++)
		for (op = 0; op < NR_OPS; op++) {
			qsort(samples[mode][op], rounds, sizeof(double), cmp_double);
			median[mode][op] = samples[mode][op][rounds / 2];
		}

	if (raw) {
		for (op = 0; op < NR_OPS; op++)
			for (mode = 0; mode < nr_modes; mode++)
				printf("%s\t%s\t%.0f\n", op_names[op], mode_names[mode],
				       median[mode][op]);
		return 0;
	}

	printf("| operation | ");
	for (mode = 0; mode < nr_modes; mode++)
		printf("%s ns/op | ", mode_names[mode]);
	printf("MMAP2+build_id / no event | %s\n",
	       nr_modes == NR_MODES ? "MMAP3 / no event | MMAP3 / MMAP2+build_id |" : "");
	printf("|---|");
	for (mode = 0; mode < nr_modes + (nr_modes == NR_MODES ? 3 : 1); mode++)
		printf("---|");
	printf("\n");
	for (op = 0; op < NR_OPS; op++) {
		printf("| %s | ", op_names[op]);
		for (mode = 0; mode < nr_modes; mode++)
			printf("%.0f | ", median[mode][op]);
		printf("%.2f | ", median[MODE_MMAP2_BUILD_ID][op] / median[MODE_NONE][op]);
		if (nr_modes == NR_MODES)
			printf("%.2f | %.2f |", median[MODE_MMAP3][op] / median[MODE_NONE][op],
			       median[MODE_MMAP3][op] / median[MODE_MMAP2_BUILD_ID][op]);
		printf("\n");
	}
	printf("(median of %d interleaved rounds of at least %d ms per operation and mode)\n",
	       rounds, batch_ms);
	return 0;

usage:
	fprintf(stderr, "usage: mmap3-opcost [--rounds N] [--batch-ms MS] [--raw] --dso FILE DIR\n");
	return 2;
}
