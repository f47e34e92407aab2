/* SPDX-License-Identifier: GPL-2.0 */
/*
 * Helpers for the PERF_RECORD_MMAP3 selftests: perf events that ask for
 * mmap records, collecting their records, writing ELF fixtures and reading
 * build IDs back from files in userspace (with libelf, independently of the
 * kernel's parser).
 */
#ifndef MMAP3_UTIL_H
#define MMAP3_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <limits.h>
#include <stdint.h>
#include <sys/types.h>
#include <linux/perf_event_mmap3.h>

#ifndef ARRAY_SIZE
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))
#endif

/* What an event asks for */
enum {
	EV_MMAP3	= 1 << 0,
	EV_MMAP2	= 1 << 1,
	EV_MMAP		= 1 << 2,
	EV_BUILD_ID	= 1 << 3,	/* attr.build_id (MMAP2 union layout) */
	EV_DATA		= 1 << 4,	/* attr.mmap_data */
	EV_INHERIT	= 1 << 5,
	EV_DISABLED	= 1 << 6,
	EV_ENABLE_ON_EXEC = 1 << 7,
	EV_BPF		= 1 << 8,	/* attr.ksymbol and attr.bpf_event */
};

/* The sample_id_all trailer of every event mmap3_open() opens */
#define MMAP3_SAMPLE_ID_SIZE	16

struct mmap3_event {
	int fd;
	void *base;		/* perf_event_mmap_page, then the data area */
	size_t data_size;
	uint64_t lost;		/* from PERF_RECORD_LOST */
};

/* One record, copied out of the ring buffer */
struct rec {
	struct perf_event_header *hdr;	/* malloc()ed, hdr->size bytes */
};

struct rec_list {
	struct rec *v;
	size_t n, cap;
	uint64_t lost;
	size_t bad;		/* records whose size made no sense */
};

/* Does the running kernel advertise MMAP3? */
bool mmap3_supported(void);

/*
 * Open a software dummy event on @pid/@cpu asking for what @flags say,
 * with a ring buffer of @pages data pages.  Returns 0 or -errno.
 */
int mmap3_open(struct mmap3_event *ev, pid_t pid, int cpu, unsigned int flags,
	       size_t pages);
/* Only perf_event_open(), no buffer: returns an fd or -errno. */
int mmap3_open_fd(pid_t pid, int cpu, unsigned int flags);
void mmap3_close(struct mmap3_event *ev);

/* Move every record now in @ev's buffer to @list. */
void mmap3_collect(struct mmap3_event *ev, struct rec_list *list);

/*
 * One event per online CPU for @pid (-1: every task).  Inherited events
 * need this: the kernel refuses to mmap an inherited per-task event whose
 * cpu is -1.
 */
struct mmap3_events {
	int n;
	struct mmap3_event *ev;
};

int mmap3_open_cpus(struct mmap3_events *evs, pid_t pid, unsigned int flags,
		    size_t pages);
void mmap3_collect_cpus(struct mmap3_events *evs, struct rec_list *list);
void mmap3_close_cpus(struct mmap3_events *evs);
void rec_list_free(struct rec_list *list);

/* Accessors for MMAP3 records */
static inline const struct perf_mmap3_record *as_mmap3(const struct rec *r)
{
	return r->hdr->type == PERF_MMAP3_RECORD_TYPE ?
		(const struct perf_mmap3_record *)r->hdr : NULL;
}

/* First MMAP3 record in @list for @path (NULL: any) after index *@from. */
const struct perf_mmap3_record *find_mmap3(const struct rec_list *list,
					   const char *path, size_t *from);
/* Number of records of @type for @path in @list. */
size_t count_records(const struct rec_list *list, uint32_t type,
		     const char *path);
/* Filename of an MMAP2 record, or NULL */
const char *mmap2_filename(const struct rec *r);

/*
 * Check that an MMAP3 record is well formed: its size covers the fixed part
 * and a NUL-terminated filename padded to 8 bytes; status and size agree.
 * Returns NULL or a description of the problem.
 */
const char *mmap3_record_problem(const struct perf_event_header *hdr,
				 bool sample_id_all);

/* ELF fixtures */
enum elf_damage {
	ELF_OK,
	ELF_HUGE_PHNUM,		/* e_phnum = 0xffff */
	ELF_NOTE_PAST_EOF,	/* PT_NOTE p_offset beyond the file */
	ELF_NAMESZ_OVERFLOW,	/* n_namesz = 0xffffffff */
	ELF_DESCSZ_OVERFLOW,	/* n_descsz = 0xffffffff */
	ELF_OVERSIZE_ID,	/* 24-byte build ID */
	ELF_TRUNCATED,		/* file ends inside the program headers */
};

struct elf_spec {
	bool elf32;
	unsigned int id_len;	/* 0: no build-id note */
	unsigned char id_seed;	/* build ID bytes are seed, seed+1, ... */
	size_t note_off;	/* 0: 0x200 */
	size_t phoff;		/* 0: right after the ELF header */
	size_t size;		/* 0: 8192 */
	bool executable;	/* x86-64 ET_EXEC that exits 0 */
	enum elf_damage damage;	/* of the build-id note (or its segment) */
	unsigned int notes_before; /* other notes before the build-id note */
	bool second_segment;	/* the other notes in a PT_NOTE of their own */
	bool align8;		/* PT_NOTE aligned to 8, notes padded to 8 */
};

/* Write @spec to @path (via a temporary and rename() if @replace). */
int elf_write(const char *path, const struct elf_spec *spec, bool replace);
/* Rewrite @path in place, keeping its inode. */
int elf_rewrite_in_place(const char *path, const struct elf_spec *spec);
/* Write @spec over the contents of the open file @fd. */
int elf_write_fd(int fd, const struct elf_spec *spec);
/* The build ID @spec describes. */
void elf_spec_build_id(const struct elf_spec *spec, unsigned char *id,
		       unsigned int *len);

/*
 * Read the build ID of a file in userspace, with libelf.
 * Returns 1 found, 0 no build ID, -1 error.
 */
int file_build_id(const char *path, unsigned char *id, unsigned int *len);
/* The same for an ELF image in memory (the vDSO) */
int mem_build_id(const void *image, size_t size, unsigned char *id,
		 unsigned int *len);

/* Format a build ID as hex into @buf (at least 41 bytes). */
const char *hex(const unsigned char *id, unsigned int len, char *buf);

/*
 * A FUSE mount served by the fuse_backing daemon (selftests/fuse_backing.c):
 * a read-only view of the regular files of a backing directory that the
 * kernel does not cache, optionally with one file whose reads hang.
 */
struct fuse_backing {
	pid_t pid;		/* the daemon; 0: none */
	int report;		/* read end of its standard output; -1: none */
	char mnt[PATH_MAX];
	char line[256];		/* report text read but not yet returned */
	size_t len;
};

/* An idle fuse_backing, safe to pass to fuse_backing_stop() */
void fuse_backing_init(struct fuse_backing *fb);

/* fuse_backing_start() flags */
#define FUSE_BACKING_LOG	1	/* report getattr and read requests too */
#define FUSE_BACKING_SYNC_READ	2	/* the daemon asks for synchronous reads */

/*
 * Start @daemon serving @backing on @mnt (reads of @hang, if not NULL, hang;
 * @flags: FUSE_BACKING_*, see fuse_backing.c) and wait,
 * for at most @timeout_ms, until @mnt is a FUSE mount.  The daemon stops
 * when the calling thread exits.  Returns NULL, or what went wrong (the
 * daemon is then stopped).
 */
const char *fuse_backing_start(struct fuse_backing *fb, const char *daemon,
			       const char *backing, const char *mnt,
			       const char *hang, unsigned int flags,
			       int timeout_ms);

/*
 * The next line the daemon reported ("hang PID", ...), waiting for at most
 * @timeout_ms.  Returns 1 with the line (no newline) in @buf,
 * 0 if none came in time, -1 if the daemon closed its output.
 */
int fuse_backing_report(struct fuse_backing *fb, char *buf, size_t size,
			int timeout_ms);

/*
 * Stop the daemon: SIGTERM, and SIGKILL if it has not exited within
 * @timeout_ms.  Either way its connection is closed, which ends every request
 * still pending on it, and the mount is detached.
 */
void fuse_backing_stop(struct fuse_backing *fb, int timeout_ms);

/*
 * A Coda mount served by the coda_venus daemon (selftests/coda_venus.c): a
 * read-only directory of the regular files of @cache, each open of which
 * the kernel is handed that file itself as its container file.  Start
 * @daemon on @mnt and wait, for at most @timeout_ms, until @mnt is a Coda
 * mount.  The same life as a fuse_backing daemon: it stops when the calling
 * thread exits, fuse_backing_report() returns the lines it reports,
 * fuse_backing_stop() stops it and detaches the mount.  Returns NULL, or
 * what went wrong (the daemon is then stopped).
 */
const char *coda_venus_start(struct fuse_backing *fb, const char *daemon,
			     const char *cache, const char *mnt, int timeout_ms);

/* Milliseconds on CLOCK_MONOTONIC, for bounded waits */
long long monotonic_ms(void);

/*
 * Wait for at most @timeout_ms for the child @pid to exit, polling.  Returns
 * 1 (reaped, *@status set), 0 (still running) or -1 (waitpid() failed).
 */
int wait_exit(pid_t pid, int *status, int timeout_ms);

#endif
