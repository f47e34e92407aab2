// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3-opcost: the cost per operation of mapping files, under each kind of
 * perf event that reports mappings.
 *
 *   mmap3-opcost [--rounds N] [--batch-ms MS] [--threads N [--shared]]
 *                [--ops LIST] [--modes LIST] [--pages N] [--raw] --dso FILE DIR
 *
 * DIR is a writable directory (the guest's tmpfs) for the fixtures; FILE a
 * shared object to dlopen (copied into DIR).  Modes: no event, MMAP2,
 * MMAP2 + build_id and, where the kernel has it, MMAP3 (--modes: none,
 * mmap2, mmap2-build-id, mmap3); each mode is an event on this process,
 * inherited by its children and threads.
 * Operations (--ops, a comma-separated list of the short names):
 *
 *   mmap           mmap + munmap of an ELF with PROT_EXEC (the file stays
 *                  in the page cache: a build-id store hit, or a re-parse)
 *   dlopen         dlopen + dlclose
 *   fork-exec      fork + exec of a tiny static ELF
 *   mprotect-anon  an anonymous page written, made PROT_READ|PROT_EXEC and
 *                  made PROT_READ|PROT_WRITE again, as a JIT does
 *   mprotect-file  a private mapping of an ELF toggled PROT_READ ->
 *                  PROT_READ|PROT_EXEC -> PROT_READ
 *
 * Rounds interleave the modes, starting each round with a different one,
 * so that drift and the kernel's deferred work after an event closes (the
 * build-id cache turns itself off a second later) hit them alike; the
 * table shows the median over rounds and ratios.
 *
 * --threads N runs each batch on N threads started after the event is
 * opened (so they inherit it), each on its own copy of the ELF and of the
 * DSO ("distinct"), or with --shared all on the same files.  A batch then
 * reports guest time per operation of all threads together (the batch's
 * elapsed time over the operations of all threads: the inverse of the
 * throughput), and the table also shows ns/op per thread.
 *
 * Each timed batch repeats its operation until at least --batch-ms have
 * passed on CLOCK_MONOTONIC.  Under QEMU -icount that clock counts guest
 * instructions; otherwise it is the host's time, with the host's load in
 * it.
 *
 * --raw prints "operation<TAB>mode<TAB>ns" lines instead of the table, for
 * scripts/bench/kernel to combine runs on several boots; with threads the
 * operation is suffixed ", N threads distinct" or ", N threads shared".
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <pthread.h>
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
enum { OP_MMAP, OP_DLOPEN, OP_FORK_EXEC, OP_MPROTECT_ANON, OP_MPROTECT_FILE, NR_OPS };

static const char *const mode_names[NR_MODES] = {
	"no event", "MMAP2", "MMAP2+build_id", "MMAP3",
};
static const unsigned int mode_flags[NR_MODES] = {
	0, EV_MMAP | EV_MMAP2, EV_MMAP | EV_MMAP2 | EV_BUILD_ID, EV_MMAP3,
};
static const char *const op_names[NR_OPS] = {
	"mmap+munmap PROT_EXEC", "dlopen+dlclose", "fork+exec",
	"mprotect RW<->RX anon", "mprotect R<->RX file",
};
static const char *const mode_short[NR_MODES] = {
	"none", "mmap2", "mmap2-build-id", "mmap3",
};
static const char *const op_short[NR_OPS] = {
	"mmap", "dlopen", "fork-exec", "mprotect-anon", "mprotect-file",
};

#define MAX_THREADS 64

/* One thread's files, mappings and result */
struct worker {
	char elf[4096], dso[4096];
	char *anon;		/* mprotect-anon: one page, RW between ops */
	void *file_map;		/* mprotect-file: one page of elf, R between ops */
	int op;
	long batch_ms;
	pthread_barrier_t *start;
	long n;			/* operations done */
	double t0, t1;		/* when the batch started and ended */
	int err;		/* errno of a failed operation, or 0 */
};

static char exe_path[4096];
static long page_size;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static int do_op(struct worker *w)
{
	switch (w->op) {
	case OP_MMAP: {
		int fd = open(w->elf, O_RDONLY | O_CLOEXEC);
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
		void *h = dlopen(w->dso, RTLD_NOW | RTLD_LOCAL);

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
	case OP_MPROTECT_ANON:
		/* a JIT writes code, then makes it executable */
		w->anon[w->n & 63] = (char)0xc3;
		if (mprotect(w->anon, page_size, PROT_READ | PROT_EXEC))
			return -1;
		return mprotect(w->anon, page_size, PROT_READ | PROT_WRITE);
	case OP_MPROTECT_FILE:
		if (mprotect(w->file_map, page_size, PROT_READ | PROT_EXEC))
			return -1;
		return mprotect(w->file_map, page_size, PROT_READ);
	}
	errno = EINVAL;
	return -1;
}

/* What an operation needs mapped before its batch starts */
static int worker_setup(struct worker *w)
{
	if (w->op == OP_MPROTECT_ANON) {
		w->anon = mmap(NULL, page_size, PROT_READ | PROT_WRITE,
			       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (w->anon == MAP_FAILED) {
			w->anon = NULL;
			return -1;
		}
		memset(w->anon, 0, page_size);
	} else if (w->op == OP_MPROTECT_FILE) {
		int fd = open(w->elf, O_RDONLY | O_CLOEXEC);

		if (fd < 0)
			return -1;
		w->file_map = mmap(NULL, page_size, PROT_READ, MAP_PRIVATE, fd, 0);
		close(fd);
		if (w->file_map == MAP_FAILED) {
			w->file_map = NULL;
			return -1;
		}
	}
	return 0;
}

static void worker_teardown(struct worker *w)
{
	if (w->anon)
		munmap(w->anon, page_size);
	if (w->file_map)
		munmap(w->file_map, page_size);
	w->anon = NULL;
	w->file_map = NULL;
}

static void *worker_run(void *arg)
{
	struct worker *w = arg;
	double t;

	w->n = 0;
	w->err = 0;
	if (worker_setup(w))
		w->err = errno;
	if (w->start)
		pthread_barrier_wait(w->start);
	w->t0 = t = now_ns();
	while (!w->err && t - w->t0 < w->batch_ms * 1e6) {
		if (do_op(w))
			w->err = errno ? errno : EIO;
		else
			w->n++;
		t = now_ns();
	}
	w->t1 = t;
	worker_teardown(w);
	return NULL;
}

/*
 * Run one batch of @op on @nthreads workers.  Returns 0 and sets *@per_op
 * (elapsed ns over the operations of all threads) and *@per_thread (mean
 * over threads of their own ns/op), or -errno.
 */
static int run_batch(struct worker *ws, int nthreads, int op, long batch_ms,
		     double *per_op, double *per_thread)
{
	pthread_t tids[MAX_THREADS];
	pthread_barrier_t start;
	double t0 = 0, t1 = 0, sum = 0;
	long total = 0;
	int i, err = 0;

	for (i = 0; i < nthreads; i++) {
		ws[i].op = op;
		ws[i].batch_ms = batch_ms;
		ws[i].start = nthreads > 1 ? &start : NULL;
	}
	if (nthreads == 1) {
		worker_run(&ws[0]);
	} else {
		pthread_barrier_init(&start, NULL, nthreads);
		for (i = 0; i < nthreads; i++) {
			err = pthread_create(&tids[i], NULL, worker_run, &ws[i]);
			if (err) {
				/* the barrier can never open now */
				fprintf(stderr, "mmap3-opcost: pthread_create: %s\n",
					strerror(err));
				exit(1);
			}
		}
		for (i = 0; i < nthreads; i++)
			pthread_join(tids[i], NULL);
		pthread_barrier_destroy(&start);
	}
	for (i = 0; i < nthreads; i++) {
		if (ws[i].err)
			return -ws[i].err;
		if (!ws[i].n)
			return -EAGAIN;
		if (!i || ws[i].t0 < t0)
			t0 = ws[i].t0;
		if (!i || ws[i].t1 > t1)
			t1 = ws[i].t1;
		total += ws[i].n;
		sum += (ws[i].t1 - ws[i].t0) / ws[i].n;
	}
	*per_op = (t1 - t0) / total;
	*per_thread = sum / nthreads;
	return 0;
}

/*
 * Empty the events' buffers and return how many records the kernel had to
 * drop: a full buffer makes the kernel skip writing records, which would
 * make a mode look cheaper than it is.
 */
static uint64_t drain(struct mmap3_events *evs)
{
	uint64_t lost = 0;
	int i;

	for (i = 0; i < evs->n; i++) {
		struct mmap3_event *ev = &evs->ev[i];
		struct perf_event_mmap_page *pg = ev->base;
		const char *data = (const char *)ev->base + page_size;
		uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
		uint64_t tail = pg->data_tail;

		while (tail < head) {
			/* records are 8-byte aligned: a header never straddles the end */
			const struct perf_event_header *h =
				(const void *)(data + tail % ev->data_size);

			if (h->size < sizeof(*h) || h->size > head - tail)
				break;
			if (h->type == PERF_RECORD_LOST && h->size >= 24) {
				uint64_t v;
				size_t off = (tail + 16) % ev->data_size;

				memcpy(&v, data + off, sizeof(v));
				lost += v;
			}
			tail += h->size;
		}
		__atomic_store_n(&pg->data_tail, head, __ATOMIC_RELEASE);
	}
	return lost;
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

/* Set on[i] for each of @names (@n of them) that the comma-separated @list names */
static int parse_list(char *list, const char *const *names, int n, int *on,
		      const char *what)
{
	char *tok, *save;
	int i;

	memset(on, 0, n * sizeof(*on));
	for (tok = strtok_r(list, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (i = 0; i < n; i++)
			if (!strcmp(tok, names[i]))
				break;
		if (i == n) {
			fprintf(stderr, "mmap3-opcost: unknown %s '%s' (", what, tok);
			for (i = 0; i < n; i++)
				fprintf(stderr, "%s%s", i ? ", " : "", names[i]);
			fprintf(stderr, ")\n");
			return -1;
		}
		on[i] = 1;
	}
	return 0;
}

/* A value, or "-" for a mode that did not run */
static const char *fmt(char *buf, double v)
{
	if (v > 0)
		sprintf(buf, "%.0f", v);
	else
		strcpy(buf, "-");
	return buf;
}

static const char *fmt_ratio(char *buf, double a, double b)
{
	if (a > 0 && b > 0)
		sprintf(buf, "%.3f", a / b);
	else
		strcpy(buf, "-");
	return buf;
}

static void op_label(char *buf, size_t len, int op, int nthreads, int shared)
{
	if (nthreads == 1)
		snprintf(buf, len, "%s", op_names[op]);
	else
		snprintf(buf, len, "%s, %d threads %s", op_names[op], nthreads,
			 shared ? "shared" : "distinct");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "batch-ms", required_argument, NULL, 'b' },
		{ "dso", required_argument, NULL, 'd' },
		{ "threads", required_argument, NULL, 't' },
		{ "shared", no_argument, NULL, 's' },
		{ "ops", required_argument, NULL, 'o' },
		{ "modes", required_argument, NULL, 'm' },
		{ "pages", required_argument, NULL, 'p' },
		{ "raw", no_argument, NULL, 'R' },
		{ NULL, 0, NULL, 0 },
	};
	int rounds = 8, batch_ms = 300, raw = 0, nthreads = 1, shared = 0;
	int c, round, mode, op, nr_modes, i, on[NR_OPS], mode_on[NR_MODES];
	int modes[NR_MODES], nm = 0;
	char b1[32], b2[32], b3[32];
	long pages = 4096;
	double *samples[NR_MODES][NR_OPS], *thread_samples[NR_MODES][NR_OPS];
	double median[NR_MODES][NR_OPS], thread_median[NR_MODES][NR_OPS];
	uint64_t lost[NR_MODES] = { 0 };
	struct elf_spec lib = { .id_len = 20, .id_seed = 1, .size = 16384 };
	struct elf_spec exe = { .id_len = 20, .id_seed = 2, .executable = true };
	struct worker *ws;
	const char *dso = NULL, *dir;
	char label[256];
	int err;

	for (op = 0; op < NR_OPS; op++)
		on[op] = 1;
	for (mode = 0; mode < NR_MODES; mode++)
		mode_on[mode] = 1;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		if (c == 'r')
			rounds = atoi(optarg);
		else if (c == 'b')
			batch_ms = atoi(optarg);
		else if (c == 'd')
			dso = optarg;
		else if (c == 't')
			nthreads = atoi(optarg);
		else if (c == 's')
			shared = 1;
		else if (c == 'o') {
			if (parse_list(optarg, op_short, NR_OPS, on, "operation"))
				return 2;
		} else if (c == 'm') {
			if (parse_list(optarg, mode_short, NR_MODES, mode_on, "mode"))
				return 2;
		} else if (c == 'p')
			pages = atol(optarg);
		else if (c == 'R')
			raw = 1;
		else
			goto usage;
	}
	if (optind != argc - 1 || !dso || rounds < 1 || batch_ms < 1 ||
	    nthreads < 1 || nthreads > MAX_THREADS || pages < 1 ||
	    (pages & (pages - 1)))
		goto usage;
	dir = argv[optind];
	page_size = sysconf(_SC_PAGESIZE);

	/*
	 * Worker i maps DIR/bench-lib-i.so and dlopens DIR/bench-dso-i.so
	 * (distinct ELFs, distinct build IDs); with --shared all use _0.
	 */
	ws = calloc(nthreads, sizeof(*ws));
	if (!ws)
		return 1;
	for (i = 0; i < nthreads; i++) {
		int f = shared ? 0 : i;

		snprintf(ws[i].elf, sizeof(ws[i].elf), "%s/bench-lib-%d.so", dir, f);
		snprintf(ws[i].dso, sizeof(ws[i].dso), "%s/bench-dso-%d.so", dir, f);
		if (i != f)
			continue;
		lib.id_seed = 1 + 2 * i;
		if ((err = elf_write(ws[i].elf, &lib, false))) {
			fprintf(stderr, "mmap3-opcost: writing %s: %s\n", ws[i].elf,
				strerror(-err));
			return 1;
		}
		if (copy_file(dso, ws[i].dso)) {
			fprintf(stderr, "mmap3-opcost: copying %s to %s: %s\n", dso,
				ws[i].dso, strerror(errno));
			return 1;
		}
	}
	snprintf(exe_path, sizeof(exe_path), "%s/bench-exe", dir);
	if ((err = elf_write(exe_path, &exe, false))) {
		fprintf(stderr, "mmap3-opcost: writing %s: %s\n", exe_path, strerror(-err));
		return 1;
	}
	nr_modes = mmap3_supported() ? NR_MODES : MODE_MMAP3;
	if (!mmap3_supported() && mode_on[MODE_MMAP3] && mode_on[MODE_NONE] +
	    mode_on[MODE_MMAP2] + mode_on[MODE_MMAP2_BUILD_ID] == 0) {
		fprintf(stderr, "mmap3-opcost: this kernel has no MMAP3\n");
		return 1;
	}
	for (mode = 0; mode < nr_modes; mode++)
		if (mode_on[mode])
			modes[nm++] = mode;

	for (mode = 0; mode < nr_modes; mode++)
		for (op = 0; op < NR_OPS; op++) {
			samples[mode][op] = calloc(rounds, sizeof(double));
			thread_samples[mode][op] = calloc(rounds, sizeof(double));
		}

	for (round = 0; round < rounds; round++) {
		int m;

		for (m = 0; m < nm; m++) {
			struct mmap3_events evs = { 0 };

			mode = modes[(m + round) % nm];
			if (mode_flags[mode]) {
				err = mmap3_open_cpus(&evs, 0, mode_flags[mode] | EV_INHERIT, pages);
				if (err) {
					fprintf(stderr, "mmap3-opcost: %s: %s\n",
						mode_names[mode], strerror(-err));
					return 1;
				}
			}
			for (op = 0; op < NR_OPS; op++) {
				if (!on[op])
					continue;
				err = run_batch(ws, nthreads, op, batch_ms,
						&samples[mode][op][round],
						&thread_samples[mode][op][round]);
				if (err) {
					fprintf(stderr, "mmap3-opcost: %s failed: %s\n",
						op_names[op], strerror(-err));
					return 1;
				}
				if (evs.n)
					lost[mode] += drain(&evs);
			}
			mmap3_close_cpus(&evs);
		}
	}

	for (mode = 0; mode < nr_modes; mode++) {
		if (lost[mode])
			fprintf(stderr, "mmap3-opcost: warning: %s lost %llu records (buffers full; try a larger --pages)\n",
				mode_names[mode], (unsigned long long)lost[mode]);
		for (op = 0; op < NR_OPS; op++) {
			qsort(samples[mode][op], rounds, sizeof(double), cmp_double);
			qsort(thread_samples[mode][op], rounds, sizeof(double), cmp_double);
			median[mode][op] = samples[mode][op][rounds / 2];
			thread_median[mode][op] = thread_samples[mode][op][rounds / 2];
		}
	}

	if (raw) {
		for (op = 0; op < NR_OPS; op++) {
			if (!on[op])
				continue;
			op_label(label, sizeof(label), op, nthreads, shared);
			for (mode = 0; mode < nr_modes; mode++)
				if (mode_on[mode])
					printf("%s\t%s\t%.0f\n", label, mode_names[mode],
					       median[mode][op]);
		}
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
		if (!on[op])
			continue;
		op_label(label, sizeof(label), op, nthreads, shared);
		printf("| %s | ", label);
		for (mode = 0; mode < nr_modes; mode++)
			printf("%s | ", fmt(b1, median[mode][op]));
		printf("%s | ", fmt_ratio(b1, median[MODE_MMAP2_BUILD_ID][op], median[MODE_NONE][op]));
		if (nr_modes == NR_MODES)
			printf("%s | %s |", fmt_ratio(b2, median[MODE_MMAP3][op], median[MODE_NONE][op]),
			       fmt_ratio(b3, median[MODE_MMAP3][op], median[MODE_MMAP2_BUILD_ID][op]));
		printf("\n");
	}
	if (nthreads > 1) {
		printf("\nns/op per thread (each thread's own time per operation):\n\n| operation | ");
		for (mode = 0; mode < nr_modes; mode++)
			printf("%s | ", mode_names[mode]);
		printf("\n|---|");
		for (mode = 0; mode < nr_modes; mode++)
			printf("---|");
		printf("\n");
		for (op = 0; op < NR_OPS; op++) {
			if (!on[op])
				continue;
			op_label(label, sizeof(label), op, nthreads, shared);
			printf("| %s | ", label);
			for (mode = 0; mode < nr_modes; mode++)
				printf("%s | ", fmt(b1, thread_median[mode][op]));
			printf("\n");
		}
		printf("\nthroughput, all threads (operations/s):\n\n");
		for (op = 0; op < NR_OPS; op++) {
			if (!on[op])
				continue;
			op_label(label, sizeof(label), op, nthreads, shared);
			printf("| %s | ", label);
			for (mode = 0; mode < nr_modes; mode++)
				printf("%s | ", fmt(b1, median[mode][op] > 0 ? 1e9 / median[mode][op] : 0));
			printf("\n");
		}
	}
	printf("(median of %d interleaved rounds of at least %d ms per operation and mode; %s)\n",
	       rounds, batch_ms,
	       nthreads > 1 ? "ns/op is the batch's elapsed time over the operations of all threads" :
	       "one thread");
	return 0;

usage:
	fprintf(stderr, "usage: mmap3-opcost [--rounds N] [--batch-ms MS] [--threads N [--shared]]\n"
		"                    [--ops mmap,dlopen,fork-exec,mprotect-anon,mprotect-file]\n"
		"                    [--modes none,mmap2,mmap2-build-id,mmap3]\n"
		"                    [--pages N (power of 2)] [--raw] --dso FILE DIR\n");
	return 2;
}
