// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3-kprofile: where a command's kernel instructions go, in an icount
 * guest (scripts/vm/run --icount shift=0,...), where guest time counts
 * guest instructions, so cpu-clock sampling every PERIOD ns samples every
 * PERIOD instructions.
 *
 *   mmap3-kprofile PERIOD OUT -- COMMAND...
 *
 * Runs COMMAND with a CPU-wide cpu-clock event on CPU 0 (icount guests have
 * one CPU) that asks for kernel call chains and nothing else: no mmap,
 * comm or task records.  perf record would open an event that tracks
 * mappings, which changes what the kernel does on the very paths measured
 * (it adds an MMAP2 record to every mapping).  Samples of other processes
 * are dropped.  OUT gets a "# samples N user N lost N period N" line, then
 * one line per kernel function, "SELF CHILDREN NAME": the samples with the
 * function at the top, and those with it anywhere in the call chain (names
 * from /proc/kallsyms: run as root with kernel.kptr_restrict=0).  Compare
 * two runs per unit of a function both do alike, such as __vm_munmap's
 * CHILDREN for mmap + munmap.
 */
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define RING_PAGES	512
#define MAX_SYMS	(1 << 18)

struct sym {
	uint64_t addr;
	char name[64];
	long self, children;
	long last_sample;	/* counted once per sample in CHILDREN */
};

static struct sym *syms;
static int nr_syms;

static int by_addr(const void *a, const void *b)
{
	const struct sym *x = a, *y = b;

	return x->addr < y->addr ? -1 : x->addr > y->addr;
}

static int read_kallsyms(void)
{
	FILE *f = fopen("/proc/kallsyms", "r");
	char line[512], name[256], type;
	unsigned long long addr;

	if (!f)
		return -1;
	syms = calloc(MAX_SYMS, sizeof(*syms));
	while (syms && nr_syms < MAX_SYMS && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%llx %c %255s", &addr, &type, name) != 3 || !addr)
			continue;
		if (type != 't' && type != 'T')
			continue;
		syms[nr_syms].addr = addr;
		snprintf(syms[nr_syms].name, sizeof(syms[nr_syms].name), "%.63s", name);
		nr_syms++;
	}
	fclose(f);
	if (!nr_syms)
		return -1;
	qsort(syms, nr_syms, sizeof(*syms), by_addr);
	return 0;
}

static struct sym *sym_of(uint64_t ip)
{
	int lo = 0, hi = nr_syms - 1, found = -1;

	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;

		if (syms[mid].addr <= ip) {
			found = mid;
			lo = mid + 1;
		} else {
			hi = mid - 1;
		}
	}
	return found < 0 ? NULL : &syms[found];
}

int main(int argc, char **argv)
{
	struct perf_event_attr attr = {
		.type = PERF_TYPE_SOFTWARE,
		.size = sizeof(attr),
		.config = PERF_COUNT_SW_CPU_CLOCK,
		.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_CALLCHAIN,
		.exclude_callchain_user = 1,
		.wakeup_events = 64,
	};
	long samples = 0, user = 0, lost = 0;
	size_t page = sysconf(_SC_PAGESIZE), size = page * RING_PAGES;
	struct perf_event_mmap_page *meta;
	int go[2], fd, status = 0, done = 0, i;
	char *ring;
	FILE *out;
	pid_t pid;

	if (argc < 5 || strcmp(argv[3], "--") || atol(argv[1]) <= 0) {
		fprintf(stderr, "usage: mmap3-kprofile PERIOD OUT -- COMMAND...\n");
		return 2;
	}
	attr.sample_period = atol(argv[1]);
	out = fopen(argv[2], "w");
	if (!out) {
		perror(argv[2]);
		return 1;
	}
	if (read_kallsyms()) {
		fprintf(stderr, "mmap3-kprofile: no kernel symbols in /proc/kallsyms (root, kernel.kptr_restrict=0?)\n");
		return 1;
	}
	fd = syscall(SYS_perf_event_open, &attr, -1, 0, -1, 0);
	if (fd < 0) {
		perror("perf_event_open (CPU-wide: root or kernel.perf_event_paranoid<=0)");
		return 1;
	}
	ring = mmap(NULL, page + size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (ring == MAP_FAILED) {
		perror("mmap of the ring buffer");
		return 1;
	}
	meta = (void *)ring;
	if (pipe(go))
		return 1;
	pid = fork();
	if (pid < 0)
		return 1;
	if (!pid) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(127);
		execvp(argv[4], argv + 4);
		_exit(127);
	}
	close(go[0]);
	if (write(go[1], "x", 1) != 1)
		return 1;

	for (;;) {
		uint64_t head = __atomic_load_n(&meta->data_head, __ATOMIC_ACQUIRE);
		uint64_t tail = meta->data_tail;

		if (!done && waitpid(pid, &status, WNOHANG) == pid)
			done = 1;
		while (tail < head) {
			struct perf_event_header h;
			uint64_t buf[1024], *ips, nr, ip;
			size_t k;

			for (k = 0; k < sizeof(h); k++)
				((char *)&h)[k] = ring[page + (tail + k) % size];
			for (k = 0; k < h.size && k < sizeof(buf); k++)
				((char *)buf)[k] = ring[page + (tail + k) % size];
			tail += h.size;
			if (h.type == PERF_RECORD_LOST)
				lost++;
			if (h.type != PERF_RECORD_SAMPLE || h.size > sizeof(buf))
				continue;
			/* header, ip, pid/tid, nr, ips[nr] */
			if ((pid_t)(buf[2] & 0xffffffff) != pid)
				continue;
			ip = buf[1];
			nr = buf[3];
			ips = &buf[4];
			if (4 + nr > h.size / sizeof(uint64_t))
				continue;
			samples++;
			if (ip < 0xffff000000000000ull) {
				user++;
				continue;
			}
			if (sym_of(ip))
				sym_of(ip)->self++;
			for (k = 0; k < nr; k++) {
				struct sym *s;

				if (ips[k] >= (uint64_t)-4095)	/* PERF_CONTEXT_* */
					continue;
				s = sym_of(ips[k]);
				if (s && s->last_sample != samples) {
					s->last_sample = samples;
					s->children++;
				}
			}
		}
		__atomic_store_n(&meta->data_tail, tail, __ATOMIC_RELEASE);
		if (done)
			break;
		poll(&(struct pollfd){ .fd = fd, .events = POLLIN }, 1, 50);
	}

	fprintf(out, "# samples %ld user %ld lost %ld period %llu\n", samples, user,
		lost, (unsigned long long)attr.sample_period);
	for (i = 0; i < nr_syms; i++)
		if (syms[i].self || syms[i].children)
			fprintf(out, "%ld %ld %s\n", syms[i].self, syms[i].children,
				syms[i].name);
	fclose(out);
	return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
}
