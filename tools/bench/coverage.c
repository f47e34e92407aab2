// SPDX-License-Identifier: GPL-2.0
/*
 * mmap3-coverage: how many executable mappings of a workload come with a
 * build ID.
 *
 *   mmap3-coverage [--mode mmap3|mmap2-build-id] -- COMMAND...
 *
 * Records the whole system (one event per CPU) while COMMAND runs, then, for
 * every executable file mapping, compares what the record says with the
 * file: a mapping counts as covered when its file has a build ID and the
 * record carries it.  Prints one table row per mode and lists the misses.
 * Needs root (system-wide events).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "mmap3_util.h"

#define MISC_MMAP_BUILD_ID (1 << 14)

static void usage(void)
{
	fprintf(stderr, "usage: mmap3-coverage [--mode mmap3|mmap2-build-id] -- COMMAND...\n");
	exit(2);
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "mode", required_argument, NULL, 'm' }, { NULL, 0, NULL, 0 },
	};
	bool mmap3 = mmap3_supported();
	struct mmap3_events evs;
	int c, status, err;
	struct rec_list recs = { 0 };
	size_t r, maps = 0, with_file_id = 0, covered = 0, wrong = 0;
	pid_t pid;

	while ((c = getopt_long(argc, argv, "+m:", opts, NULL)) != -1) {
		if (c != 'm')
			usage();
		if (!strcmp(optarg, "mmap3"))
			mmap3 = true;
		else if (!strcmp(optarg, "mmap2-build-id"))
			mmap3 = false;
		else
			usage();
	}
	if (optind >= argc)
		usage();

	err = mmap3_open_cpus(&evs, -1,
			      mmap3 ? EV_MMAP3 : EV_MMAP | EV_MMAP2 | EV_BUILD_ID, 1024);
	if (err) {
		fprintf(stderr, "mmap3-coverage: perf_event_open: %s%s\n", strerror(-err),
			err == -EACCES ? " (system-wide events need CAP_PERFMON "
			"or kernel.perf_event_paranoid <= 0)" : "");
		return 1;
	}
	pid = fork();
	if (pid < 0)
		return 1;
	if (!pid) {
		execvp(argv[optind], argv + optind);
		fprintf(stderr, "mmap3-coverage: %s: %s\n", argv[optind], strerror(errno));
		_exit(127);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		mmap3_collect_cpus(&evs, &recs);
		usleep(2000);
	}
	mmap3_collect_cpus(&evs, &recs);
	mmap3_close_cpus(&evs);

	for (r = 0; r < recs.n; r++) {
		const struct perf_event_header *h = recs.v[r].hdr;
		const struct perf_mmap3_record *m3 = as_mmap3(&recs.v[r]);
		unsigned char want[20], got[20];
		unsigned int want_len = 0, got_len = 0, prot;
		const char *name;
		bool file_has;

		if (m3) {
			name = m3->filename;
			prot = m3->prot;
			if (m3->build_id_status == PERF_MMAP3_BUILD_ID_FOUND) {
				got_len = m3->build_id_size;
				memcpy(got, m3->build_id, got_len);
			}
		} else if (h->type == PERF_RECORD_MMAP2) {
			const unsigned char *u = (const unsigned char *)h + 40;

			name = mmap2_filename(&recs.v[r]);
			prot = *(const uint32_t *)(u + 24);
			if (h->misc & MISC_MMAP_BUILD_ID) {
				got_len = u[0];
				memcpy(got, u + 4, got_len);
			}
		} else {
			continue;
		}
		if (!(prot & PROT_EXEC) || name[0] != '/')
			continue;
		maps++;
		file_has = file_build_id(name, want, &want_len) == 1;
		if (!file_has)
			continue;
		with_file_id++;
		if (got_len == want_len && !memcmp(got, want, want_len)) {
			covered++;
		} else if (got_len) {
			wrong++;
			printf("# wrong build ID: %s\n", name);
		} else {
			printf("# missing: %s\n", name);
		}
	}
	printf("| %-16s | %8zu | %16zu | %13zu | %6.1f%% | %5zu | %4llu |\n",
	       mmap3 ? "MMAP3" : "MMAP2 + build_id", maps, with_file_id, covered,
	       with_file_id ? 100.0 * covered / with_file_id : 0.0, wrong,
	       (unsigned long long)recs.lost);
	return WIFEXITED(status) && !WEXITSTATUS(status) && !recs.lost ? 0 : 1;
}
