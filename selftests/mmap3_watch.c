// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3_watch: a CPU-wide PERF_RECORD_MMAP3 observer for fuzzing runs
 * (make vm-trinity, scripts/test/guest-trinity).
 *
 *   mmap3_watch [--pages N] [--ready FILE]
 *   mmap3_watch --selfcheck
 *
 * Opens one event per online CPU for every task, asking for MMAP3 records
 * of executable and data mappings, and drains the rings until SIGINT or
 * SIGTERM.  Every record is checked:
 *
 *   - its size is a multiple of 8 and fits in what the kernel published;
 *   - its type is PERF_RECORD_MMAP3, PERF_RECORD_LOST, or PERF_RECORD_FORK
 *     or _EXIT (which perf sends to every event with attr.mmap_data), and
 *     the last three have their type's size;
 *   - an MMAP3 record passes mmap3_record_problem(): the fixed part and a
 *     NUL-terminated filename padded with zeros to 8 bytes, the reserved
 *     field zero, a known status, build_id_size 1..20 if and only if the
 *     status is FOUND, and build_id zero beyond build_id_size;
 *   - the mapping has a length and does not wrap, and the sample_id
 *     trailer's pid/tid are the record's.
 *
 * Then it prints "records checked: N ..., malformed: M" and the MMAP3
 * statuses seen, and exits 0 only if no record was malformed and at least
 * one MMAP3 record was checked.  --ready FILE is created once the events
 * are open, so that a script can wait for that state.  --selfcheck feeds the
 * checks a good record and one broken copy per rule, and fails unless each
 * broken one is caught.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mmap3_util.h"

/* sample_id trailer of mmap3_open_fd()'s events: PERF_SAMPLE_TID | TIME */
struct sample_id {
	uint32_t pid, tid;
	uint64_t time;
};

struct lost_record {
	struct perf_event_header header;
	uint64_t id, lost;
	struct sample_id sid;
};

/* PERF_RECORD_FORK and PERF_RECORD_EXIT */
struct task_record {
	struct perf_event_header header;
	uint32_t pid, ppid, tid, ptid;
	uint64_t time;
	struct sample_id sid;
};

static const char *const status_names[] = {
	"UNAVAILABLE", "FOUND", "NO_NOTE", "NOT_ELF", "MALFORMED", "IO_ERROR",
	"NO_FILE", "REFUSED",
};

/* NULL, or what is wrong with the record at @hdr (hdr->size bytes) */
static const char *record_problem(const struct perf_event_header *hdr)
{
	const struct perf_mmap3_record *m = (const void *)hdr;
	const struct sample_id *sid;
	const char *problem;

	if (hdr->size < sizeof(*hdr) || hdr->size % 8)
		return "size not a multiple of 8";
	if (hdr->type == PERF_RECORD_LOST) {
		if (hdr->size != sizeof(struct lost_record))
			return "LOST record of the wrong size";
		return NULL;
	}
	if (hdr->type == PERF_RECORD_FORK || hdr->type == PERF_RECORD_EXIT) {
		if (hdr->size != sizeof(struct task_record))
			return "FORK/EXIT record of the wrong size";
		return NULL;
	}
	if (hdr->type != PERF_MMAP3_RECORD_TYPE)
		return "unexpected record type";
	problem = mmap3_record_problem(hdr, true);
	if (problem)
		return problem;
	if (!m->len)
		return "zero-length mapping";
	if (m->addr + m->len < m->addr)
		return "mapping wraps around";
	sid = (const void *)((const char *)hdr + hdr->size - sizeof(*sid));
	/* A module's record is the kernel's (-1), made by the loading task */
	if (m->pid != (__u32)-1 && (sid->pid != m->pid || sid->tid != m->tid))
		return "sample_id pid/tid differ from the record's";
	return NULL;
}

struct stats {
	unsigned long long records, mmap3, task, lost_records, lost, malformed;
	unsigned long long status[PERF_MMAP3_BUILD_ID_STATUS_MAX + 2];
};

static void check_record(struct stats *st, const struct perf_event_header *hdr)
{
	const struct perf_mmap3_record *m = (const void *)hdr;
	const char *problem = record_problem(hdr);

	st->records++;
	if (problem) {
		if (++st->malformed <= 10) {
			fprintf(stderr, "mmap3_watch: malformed record (type %u, size %u): %s",
				hdr->type, hdr->size, problem);
			if (hdr->type == PERF_MMAP3_RECORD_TYPE &&
			    hdr->size > PERF_MMAP3_RECORD_FIXED_SIZE)
				fprintf(stderr, " [pid %u, status %u, size %u, filename %.*s]",
					m->pid, m->build_id_status, m->build_id_size,
					(int)(hdr->size - PERF_MMAP3_RECORD_FIXED_SIZE),
					m->filename);
			fputc('\n', stderr);
		}
		return;
	}
	if (hdr->type == PERF_RECORD_LOST) {
		st->lost_records++;
		st->lost += ((const struct lost_record *)hdr)->lost;
		return;
	}
	if (hdr->type != PERF_MMAP3_RECORD_TYPE) {
		st->task++;
		return;
	}
	st->mmap3++;
	st->status[m->build_id_status]++;
}

static void drain(struct mmap3_events *evs, struct stats *st)
{
	int i;

	for (i = 0; i < evs->n; i++) {
		struct rec_list list = { 0 };
		size_t j;

		mmap3_collect(&evs->ev[i], &list);
		for (j = 0; j < list.n; j++)
			check_record(st, list.v[j].hdr);
		/* a header whose size did not fit: the rest of the ring is lost */
		if (list.bad) {
			st->records += list.bad;
			st->malformed += list.bad;
			fprintf(stderr, "mmap3_watch: %zu record headers with an impossible size on CPU %d\n",
				list.bad, i);
		}
		rec_list_free(&list);
	}
}

/* --selfcheck */

#define NAME	"/usr/lib/x86_64-linux-gnu/libc.so.6"

static size_t good_record(void *buf)
{
	struct perf_mmap3_record *m = buf;
	size_t name_area = (sizeof(NAME) + 7) & ~7UL;
	size_t size = PERF_MMAP3_RECORD_FIXED_SIZE + name_area + sizeof(struct sample_id);
	struct sample_id *sid = (void *)((char *)buf + size - sizeof(*sid));

	memset(buf, 0, 512);
	m->header.type = PERF_MMAP3_RECORD_TYPE;
	m->header.size = size;
	m->pid = m->tid = 42;
	m->addr = 0x7f0000000000;
	m->len = 0x1000;
	m->prot = 5;
	m->build_id_status = PERF_MMAP3_BUILD_ID_FOUND;
	m->build_id_size = 20;
	memset(m->build_id, 0xab, 20);
	memcpy(m->filename, NAME, sizeof(NAME));
	sid->pid = sid->tid = 42;
	return size;
}

static int selfcheck(void)
{
	static uint64_t buf[64];
	struct perf_mmap3_record *m = (void *)buf;
	struct lost_record *l = (void *)buf;
	struct task_record *tr = (void *)buf;
	size_t size;
	int fails = 0, n = 0;

#define EXPECT(broken, what) do {					\
		const char *p;						\
		size = good_record(buf);				\
		(void)size;						\
		broken;							\
		p = record_problem(&m->header);				\
		n++;							\
		if (!(what) == !p) {					\
			printf("ok %d - %s%s%s\n", n, #broken,		\
			       p ? ": " : "", p ? p : "");		\
		} else {						\
			printf("not ok %d - %s: %s\n", n, #broken,	\
			       p ? p : "not caught");			\
			fails++;					\
		}							\
	} while (0)

	printf("TAP version 13\n");
	EXPECT((void)0, 0);
	EXPECT((m->build_id_size = 1, memset(m->build_id + 1, 0, 19)), 0);
	EXPECT((m->build_id_size = 4, memset(m->build_id + 4, 0, 16)), 0);
	EXPECT(m->build_id_size = 0, 1);
	EXPECT(m->build_id_size = 21, 1);
	EXPECT((m->build_id_status = PERF_MMAP3_BUILD_ID_NO_NOTE), 1);
	EXPECT((m->build_id_status = PERF_MMAP3_BUILD_ID_NO_NOTE,
		m->build_id_size = 0, memset(m->build_id, 0, 20)), 0);
	EXPECT((m->build_id_status = PERF_MMAP3_BUILD_ID_STATUS_MAX + 1,
		m->build_id_size = 0, memset(m->build_id, 0, 20)), 1);
	EXPECT((m->build_id_size = 4, memset(m->build_id + 4, 0, 16),
		m->build_id[19] = 1), 1);
	EXPECT(memset(m->filename, 'x', (sizeof(NAME) + 7) & ~7UL), 1);
	EXPECT(m->filename[sizeof(NAME) + 1] = 'x', 1);
	EXPECT(m->mmap3_flags = 2, 1);
	EXPECT(m->mmap3_flags = PERF_MMAP3_UNLOADED, 1);
	EXPECT(m->header.size -= 4, 1);
	EXPECT(m->header.size -= 8, 1);
	EXPECT(m->header.type = 10 /* PERF_RECORD_MMAP2 */, 1);
	EXPECT(m->len = 0, 1);
	EXPECT(m->addr = ~0ULL - 0x10, 1);
	EXPECT(((struct sample_id *)((char *)buf + size - 16))->tid = 43, 1);
	EXPECT((memset(buf, 0, sizeof(buf)), l->header.type = PERF_RECORD_LOST,
		l->header.size = sizeof(*l), l->lost = 3), 0);
	EXPECT((memset(buf, 0, sizeof(buf)), l->header.type = PERF_RECORD_LOST,
		l->header.size = 24), 1);
	EXPECT((memset(buf, 0, sizeof(buf)), tr->header.type = PERF_RECORD_FORK,
		tr->header.size = sizeof(*tr)), 0);
	EXPECT((memset(buf, 0, sizeof(buf)), tr->header.type = PERF_RECORD_EXIT,
		tr->header.size = sizeof(*tr) - 16), 1);
	EXPECT((memset(buf, 0, sizeof(buf)), tr->header.type = PERF_RECORD_COMM,
		tr->header.size = sizeof(*tr)), 1);
	printf("1..%d\n# Totals: pass:%d fail:%d skip:0\n", n, n - fails, fails);
	return fails ? 1 : 0;
#undef EXPECT
}

static volatile sig_atomic_t stop;

static void on_signal(int sig)
{
	stop = 1;
}

int main(int argc, char **argv)
{
	struct sigaction sa = { .sa_handler = on_signal };
	const char *ready = NULL;
	struct mmap3_events evs;
	struct pollfd *pfd;
	struct stats st = { 0 };
	size_t pages = 256;
	int i, err, ok;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--selfcheck"))
			return selfcheck();
		if (!strcmp(argv[i], "--pages") && i + 1 < argc)
			pages = strtoul(argv[++i], NULL, 0);
		else if (!strcmp(argv[i], "--ready") && i + 1 < argc)
			ready = argv[++i];
		else {
			fprintf(stderr, "usage: mmap3_watch [--pages N] [--ready FILE] | --selfcheck\n");
			return 2;
		}
	}
	if (!mmap3_supported()) {
		fprintf(stderr, "mmap3_watch: the kernel has no MMAP3 (%s missing)\n",
			PERF_MMAP3_CAP_PATH);
		return 2;
	}
	/* no SA_RESTART: the signal ends poll() */
	sigaction(SIGINT, &sa, NULL);
	sigaction(SIGTERM, &sa, NULL);

	err = mmap3_open_cpus(&evs, -1, EV_MMAP3 | EV_DATA, pages);
	if (err) {
		fprintf(stderr, "mmap3_watch: CPU-wide MMAP3 event: %s\n", strerror(-err));
		return 2;
	}
	pfd = calloc(evs.n, sizeof(*pfd));
	if (!pfd)
		return 2;
	for (i = 0; i < evs.n; i++)
		pfd[i] = (struct pollfd){ .fd = evs.ev[i].fd, .events = POLLIN };
	if (ready) {
		int fd = open(ready, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);

		if (fd < 0) {
			fprintf(stderr, "mmap3_watch: %s: %s\n", ready, strerror(errno));
			return 2;
		}
		close(fd);
	}
	fprintf(stderr, "mmap3_watch: watching %d CPUs (%zu pages each) until SIGINT/SIGTERM\n",
		evs.n, pages);

	while (!stop) {
		poll(pfd, evs.n, 200);
		drain(&evs, &st);
	}
	drain(&evs, &st);
	mmap3_close_cpus(&evs);

	printf("mmap3_watch: records checked: %llu (MMAP3 %llu, FORK/EXIT %llu, LOST %llu reporting %llu lost), malformed: %llu\n",
	       st.records, st.mmap3, st.task, st.lost_records, st.lost, st.malformed);
	printf("mmap3_watch: MMAP3 build_id_status:");
	for (i = 0; i <= PERF_MMAP3_BUILD_ID_STATUS_MAX; i++)
		printf(" %s %llu", status_names[i], st.status[i]);
	printf("\n");
	ok = !st.malformed && st.mmap3 > 0;
	if (!st.mmap3)
		printf("mmap3_watch: FAIL: no MMAP3 record was checked\n");
	if (st.malformed)
		printf("mmap3_watch: FAIL: %llu malformed records\n", st.malformed);
	return ok ? 0 : 1;
}
