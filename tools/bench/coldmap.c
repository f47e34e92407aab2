// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3-coldmap: the cost of the first executable mapping of a large ELF
 * file whose pages are not cached, per kind of mmap record.
 *
 *   mmap3-coldmap [--rounds N] [--modes LIST] [--raw] FILE
 *
 * For each round and each mode (none, mmap2-build-id, mmap3; interleaved),
 * the page cache is emptied (drop_caches; FILE must be on a filesystem where
 * that evicts it, such as 9p without caching), FILE is checked to have no
 * page cached, an event of the mode is opened on this task, and FILE is
 * mapped PROT_READ|PROT_EXEC whole.  Measured: the time of that mmap() call
 * (under QEMU -icount, the guest's instructions) and how much of FILE it
 * brought into the page cache (mincore() before any page is touched).  The
 * record's build ID is compared with the one read from FILE here, after the
 * timed part: a mode that reports another file's build ID fails the run.
 *
 * The table gives the median of the rounds; --raw prints
 * "coldmap<TAB>mode<TAB>ns<TAB>kib<TAB>status" lines instead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "mmap3_util.h"

enum { MODE_NONE, MODE_MMAP2_BUILD_ID, MODE_MMAP3, NR_MODES };

static const char *const mode_short[NR_MODES] = {
	"none", "mmap2-build-id", "mmap3",
};
static const unsigned int mode_flags[NR_MODES] = {
	0, EV_MMAP | EV_MMAP2 | EV_BUILD_ID, EV_MMAP3,
};

#define MAX_ROUNDS 64

struct result {
	double ns;
	long kib;		/* of FILE cached after the mmap() */
	char status[48];	/* what the record said */
};

static long page_size;

static double now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

/* Pages of the @len bytes at @p that are in the page cache, or -1 */
static long cached_pages(void *p, size_t len)
{
	size_t n = (len + page_size - 1) / page_size, i;
	unsigned char *vec = malloc(n);
	long cached = 0;

	if (!vec || mincore(p, len, vec)) {
		free(vec);
		return -1;
	}
	for (i = 0; i < n; i++)
		cached += vec[i] & 1;
	free(vec);
	return cached;
}

static int drop_caches(void)
{
	int fd = open("/proc/sys/vm/drop_caches", O_WRONLY | O_CLOEXEC);
	int ok;

	if (fd < 0)
		return -1;
	sync();
	ok = write(fd, "3", 1) == 1;
	close(fd);
	return ok ? 0 : -1;
}

/* Cached pages of @path now, through a mapping made without any event */
static long cached_now(const char *path, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	long n;
	void *p;

	if (fd < 0)
		return -1;
	p = mmap(NULL, len, PROT_READ, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return -1;
	n = cached_pages(p, len);
	munmap(p, len);
	return n;
}

/* What the record of the mapping at @addr said, checked against @want */
static int describe(struct rec_list *recs, int mode, void *addr,
		    const unsigned char *want, unsigned int want_len,
		    char *out, size_t size)
{
	char h[41];
	size_t i;

	if (mode == MODE_NONE) {
		snprintf(out, size, "-");
		return 0;
	}
	for (i = 0; i < recs->n; i++) {
		const struct perf_event_header *hdr = recs->v[i].hdr;

		if (mode == MODE_MMAP3 && hdr->type == PERF_MMAP3_RECORD_TYPE) {
			const struct perf_mmap3_record *m = as_mmap3(&recs->v[i]);

			if (m->addr != (uintptr_t)addr)
				continue;
			if (m->build_id_status != PERF_MMAP3_BUILD_ID_FOUND) {
				snprintf(out, size, "status %u", m->build_id_status);
				return 0;
			}
			if (m->build_id_size != want_len ||
			    memcmp(m->build_id, want, want_len)) {
				snprintf(out, size, "WRONG %s",
					 hex(m->build_id, m->build_id_size, h));
				return -1;
			}
			snprintf(out, size, "found %.12s", hex(want, want_len, h));
			return 0;
		}
		if (mode == MODE_MMAP2_BUILD_ID && hdr->type == PERF_RECORD_MMAP2) {
			/* header, pid, tid, addr, len, pgoff, then the union */
			const unsigned char *b = (const unsigned char *)hdr;
			uint64_t a;
			unsigned int len;

			memcpy(&a, b + 16, sizeof(a));
			if (a != (uintptr_t)addr)
				continue;
			if (!(hdr->misc & PERF_RECORD_MISC_MMAP_BUILD_ID)) {
				snprintf(out, size, "no build ID");
				return 0;
			}
			len = b[40];
			if (len != want_len || memcmp(b + 44, want, want_len)) {
				snprintf(out, size, "WRONG %s", hex(b + 44, len, h));
				return -1;
			}
			snprintf(out, size, "found %.12s", hex(want, want_len, h));
			return 0;
		}
	}
	snprintf(out, size, "no record");
	return mode == MODE_MMAP3 ? -1 : 0;
}

static int one(const char *path, size_t len, int mode, const unsigned char *want,
	       unsigned int want_len, struct result *r)
{
	struct mmap3_event ev = { .fd = -1 };
	struct rec_list recs = { 0 };
	double t0, t1;
	long before;
	int fd, err;
	void *p;

	if (drop_caches())
		return fprintf(stderr, "mmap3-coldmap: drop_caches: %s (needs root)\n",
			       strerror(errno)), -1;
	before = cached_now(path, len);
	if (before != 0)
		return fprintf(stderr, "mmap3-coldmap: %s keeps %ld pages cached after drop_caches; put it on 9p without caching\n",
			       path, before), -1;
	if (mode_flags[mode]) {
		err = mmap3_open(&ev, 0, -1, mode_flags[mode], 64);
		if (err)
			return fprintf(stderr, "mmap3-coldmap: event for %s: %s\n",
				       mode_short[mode], strerror(-err)), -1;
	}
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return perror(path), -1;
	t0 = now_ns();
	p = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	t1 = now_ns();
	close(fd);
	if (p == MAP_FAILED)
		return perror("mmap"), -1;
	r->ns = t1 - t0;
	r->kib = cached_pages(p, len) * (page_size / 1024);
	if (mode_flags[mode]) {
		mmap3_collect(&ev, &recs);
		mmap3_close(&ev);
	}
	err = describe(&recs, mode, p, want, want_len, r->status, sizeof(r->status));
	rec_list_free(&recs);
	munmap(p, len);
	if (err)
		fprintf(stderr, "mmap3-coldmap: %s: %s\n", mode_short[mode], r->status);
	return err;
}

static int cmp_result(const void *a, const void *b)
{
	double x = ((const struct result *)a)->ns, y = ((const struct result *)b)->ns;

	return (x > y) - (x < y);
}

static void usage(void)
{
	fprintf(stderr, "usage: mmap3-coldmap [--rounds N (1..%d)] [--modes none,mmap2-build-id,mmap3] [--raw] FILE\n",
		MAX_ROUNDS);
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "rounds", required_argument, NULL, 'r' },
		{ "modes", required_argument, NULL, 'm' },
		{ "raw", no_argument, NULL, 'R' },
		{ 0 }
	};
	static struct result res[NR_MODES][MAX_ROUNDS];
	int on[NR_MODES] = { 1, 1, 1 };
	unsigned char want[64];
	unsigned int want_len;
	int rounds = 5, raw = 0, c, m, i;
	const char *path;
	struct stat st;
	char h[129];

	page_size = sysconf(_SC_PAGESIZE);
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'r':
			rounds = atoi(optarg);
			if (rounds < 1 || rounds > MAX_ROUNDS)
				usage();
			break;
		case 'm': {
			char *tok, *save = NULL;

			memset(on, 0, sizeof(on));
			for (tok = strtok_r(optarg, ",", &save); tok;
			     tok = strtok_r(NULL, ",", &save)) {
				for (m = 0; m < NR_MODES; m++)
					if (!strcmp(tok, mode_short[m]))
						break;
				if (m == NR_MODES) {
					fprintf(stderr, "mmap3-coldmap: unknown mode '%s'\n", tok);
					usage();
				}
				on[m] = 1;
			}
			break;
		}
		case 'R':
			raw = 1;
			break;
		default:
			usage();
		}
	}
	if (optind + 1 != argc)
		usage();
	path = argv[optind];
	if (stat(path, &st) || !S_ISREG(st.st_mode) || !st.st_size)
		return fprintf(stderr, "mmap3-coldmap: %s: not a non-empty regular file\n",
			       path), 1;
	if (file_build_id(path, want, &want_len) != 1)
		return fprintf(stderr, "mmap3-coldmap: %s has no build ID to compare with\n",
			       path), 1;
	if (on[MODE_MMAP3] && !mmap3_supported()) {
		on[MODE_MMAP3] = 0;
		fprintf(stderr, "mmap3-coldmap: no MMAP3 on this kernel; mode mmap3 left out\n");
	}

	for (i = 0; i < rounds; i++)
		for (m = 0; m < NR_MODES; m++)
			if (on[m] && one(path, st.st_size, m, want, want_len, &res[m][i]))
				return 1;

	if (raw) {
		for (m = 0; m < NR_MODES; m++)
			for (i = 0; on[m] && i < rounds; i++)
				printf("coldmap\t%s\t%.0f\t%ld\t%s\n", mode_short[m],
				       res[m][i].ns, res[m][i].kib, res[m][i].status);
		return 0;
	}
	printf("%s: %lld MiB, build ID %s\n", path, (long long)st.st_size >> 20,
	       hex(want, want_len, h));
	printf("| mode | mmap() us (median of %d) | KiB read into the page cache | record |\n",
	       rounds);
	printf("|---|---|---|---|\n");
	for (m = 0; m < NR_MODES; m++) {
		if (!on[m])
			continue;
		qsort(res[m], rounds, sizeof(res[m][0]), cmp_result);
		printf("| %s | %.1f | %ld | %s |\n", mode_short[m],
		       res[m][rounds / 2].ns / 1e3, res[m][rounds / 2].kib,
		       res[m][rounds / 2].status);
	}
	return 0;
}
