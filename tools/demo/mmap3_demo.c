// SPDX-License-Identifier: GPL-2.0
/*
 * The replace-during-profile scenario, seen through perf mmap records.
 *
 * Process A maps version 1 of a library; the library is replaced by
 * rename() with version 2 and process B maps it; it is then rewritten in
 * place (same inode) with version 3 and process C maps it.  With a COLD_FILE
 * argument, process D then maps that file, which should be on a filesystem
 * where its pages are not cached yet (the host's, over 9p).  The table
 * shows, for each mapping, what the kernel reported and what a
 * pathname-based tool finds when it looks the path up afterwards.
 *
 *   mmap3-demo [COLD_FILE]
 *
 * With MMAP3 (patched kernel) the record carries the build ID read when the
 * file was mapped.  Without it the tool falls back to MMAP2 + build_id, and
 * to the path.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mmap3_util.h"

#define LIB_DIR "/tmp/mmap3-demo"
#define LIB LIB_DIR "/libdemo.so"

static void die(const char *what, int err)
{
	fprintf(stderr, "mmap3-demo: %s: %s\n", what, strerror(err));
	exit(1);
}

/* A child that maps @path executable and exits */
static pid_t run_process(const char *path)
{
	pid_t pid = fork();

	if (pid < 0)
		die("fork", errno);
	if (!pid) {
		int fd = open(path, O_RDONLY);
		void *p = fd < 0 ? MAP_FAILED :
			  mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);

		_exit(p == MAP_FAILED);
	}
	if (waitpid(pid, NULL, 0) != pid)
		die("waitpid", errno);
	return pid;
}

struct mapping {
	const char *who;
	const char *path;
	pid_t pid;
	unsigned char truth[20];
	unsigned int truth_len;
};

int main(int argc, char **argv)
{
	static const struct elf_spec versions[3] = {
		{ .id_len = 20, .id_seed = 0x10 },
		{ .id_len = 20, .id_seed = 0x40 },
		{ .id_len = 20, .id_seed = 0x70 },
	};
	struct mapping m[4] = {
		{ "A", LIB }, { "B", LIB }, { "C", LIB }, { "D", argv[1] },
	};
	int nr = argc > 1 ? 4 : 3;
	bool mmap3 = mmap3_supported();
	unsigned int flags = mmap3 ? EV_MMAP3 : EV_MMAP | EV_MMAP2 | EV_BUILD_ID;
	unsigned char now_id[20];
	unsigned int now_len = 0;
	struct mmap3_events evs;
	struct rec_list recs = { 0 };
	int err, i, right = 0, path_right = 0;
	char h1[41], h2[41], h3[41];

	mkdir(LIB_DIR, 0755);
	err = mmap3_open_cpus(&evs, 0, flags | EV_INHERIT, 64);
	if (err == -EACCES || err == -EPERM)
		die("perf_event_open (needs kernel.perf_event_paranoid <= 2 or CAP_PERFMON)", -err);
	if (err)
		die("perf_event_open", -err);

	printf("kernel: %s\n", mmap3 ? "MMAP3 (" PERF_MMAP3_CAP_PATH " present)" :
	       "no MMAP3: MMAP2 + build_id");
	printf("A maps version 1; replaced by rename() with version 2; B maps it;\n"
	       "rewritten in place (same inode) with version 3; C maps it.\n");
	if (nr == 4)
		printf("D maps %s, whose pages are not cached yet.\n", argv[1]);
	printf("\n");

	if (argc > 2) {
		fprintf(stderr, "usage: mmap3-demo [COLD_FILE]\n");
		return 2;
	}
	for (i = 0; i < 3; i++)
		elf_spec_build_id(&versions[i], m[i].truth, &m[i].truth_len);
	if (nr == 4 && file_build_id(argv[1], m[3].truth, &m[3].truth_len) != 1)
		die(argv[1], ENOEXEC);

	if ((err = elf_write(LIB, &versions[0], true)))
		die("write version 1", -err);
	m[0].pid = run_process(LIB);
	if ((err = elf_write(LIB, &versions[1], true)))
		die("write version 2", -err);
	m[1].pid = run_process(LIB);
	if ((err = elf_rewrite_in_place(LIB, &versions[2])))
		die("rewrite version 3", -err);
	m[2].pid = run_process(LIB);
	if (nr == 4)
		m[3].pid = run_process(argv[1]);

	mmap3_collect_cpus(&evs, &recs);

	printf("%-4s %-6s %-9s %-42s %-42s %s\n", "proc", "pid", "inode",
	       "build ID the kernel reported", "build ID of the file it mapped",
	       "path looked up afterwards");
	for (i = 0; i < nr; i++) {
		unsigned char *truth = m[i].truth, got[20] = { 0 };
		unsigned int truth_len = m[i].truth_len, got_len = 0;
		unsigned long long ino = 0;
		const char *how = "no record";
		size_t r;

		if (file_build_id(m[i].path, now_id, &now_len) != 1)
			now_len = 0;
		for (r = 0; r < recs.n; r++) {
			const struct perf_event_header *h = recs.v[r].hdr;
			const struct perf_mmap3_record *m3 = as_mmap3(&recs.v[r]);

			if (m3 && m3->pid == (unsigned int)m[i].pid &&
			    !strcmp(m3->filename, m[i].path)) {
				got_len = m3->build_id_size;
				memcpy(got, m3->build_id, got_len);
				ino = m3->ino;
				how = got_len ? "MMAP3" : "MMAP3, none";
			} else if (h->type == PERF_RECORD_MMAP2 &&
				   ((uint32_t *)h)[2] == (unsigned int)m[i].pid &&
				   !strcmp(mmap2_filename(&recs.v[r]), m[i].path)) {
				const unsigned char *u = (const unsigned char *)h + 40;

				if (h->misc & (1 << 14)) {
					got_len = u[0];
					memcpy(got, u + 4, got_len);
					how = "MMAP2";
				} else {
					ino = *(const uint64_t *)(u + 8);
					how = "MMAP2, none";
				}
			}
		}
		if (got_len == truth_len && !memcmp(got, truth, truth_len))
			right++;
		if (now_len == truth_len && !memcmp(now_id, truth, truth_len))
			path_right++;
		printf("%-4s %-6d %-9llu %-42s %-42s %s%s\n", m[i].who, m[i].pid, ino,
		       got_len ? hex(got, got_len, h1) : how,
		       hex(truth, truth_len, h2), hex(now_id, now_len, h3),
		       now_len == truth_len && !memcmp(now_id, truth, truth_len) ?
		       "" : "  WRONG");
	}
	printf("\nright build ID: %d of %d from the kernel's records, %d of %d by path\n",
	       right, nr, path_right, nr);
	rec_list_free(&recs);
	mmap3_close_cpus(&evs);
	return right == nr ? 0 : 1;
}
