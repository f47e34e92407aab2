// SPDX-License-Identifier: GPL-2.0
/*
 * PERF_RECORD_MMAP3 selftests.  Each test maps or executes a file and
 * compares the build ID in the record with the one userspace reads from the
 * file (libelf), or with the status the file deserves.
 *
 * Run as root on a kernel with MMAP3 (inside the project's QEMU guest);
 * without MMAP3 every test skips except mmap3_bit_rejected_without_support.
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <elf.h>
#include <gelf.h>
#include <libelf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/bpf.h>
#include <linux/magic.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include "../kselftest_harness.h"
#include "mmap3_util.h"

#define RING_PAGES	256

static void rm_rf(const char *dir)
{
	char cmd[PATH_MAX + 16];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd))
		fprintf(stderr, "# could not remove %s\n", dir);
}

/* Directory of this binary: the fixtures built with it live there. */
static const char *exe_dir(void)
{
	static char dir[PATH_MAX];
	ssize_t n;

	if (dir[0])
		return dir;
	n = readlink("/proc/self/exe", dir, sizeof(dir) - 1);
	if (n < 0)
		return ".";
	dir[n] = '\0';
	*strrchr(dir, '/') = '\0';
	return dir;
}

static int read_int_file(const char *path)
{
	FILE *f = fopen(path, "r");
	int v = -1;

	if (!f)
		return -1;
	if (fscanf(f, "%d", &v) != 1)
		v = -1;
	fclose(f);
	return v;
}

static int write_int_file(const char *path, int v)
{
	FILE *f = fopen(path, "w");
	int ret;

	if (!f)
		return -errno;
	ret = fprintf(f, "%d\n", v) < 0 ? -EIO : 0;
	if (fclose(f))
		ret = -errno;
	return ret;
}

#define PARANOID	"/proc/sys/kernel/perf_event_paranoid"

/*
 * Sysctls a test changes are restored even when the harness kills the test
 * for its timeout (which skips FIXTURE_TEARDOWN): set_sysctl() notes the
 * old value in SYSCTL_JOURNAL before it writes, and restore_sysctls()
 * writes the noted values back.  It runs at every FIXTURE_SETUP and
 * FIXTURE_TEARDOWN and when the harness exits.
 */
#define SYSCTL_JOURNAL	"/tmp/mmap3_test.sysctls"

static void restore_sysctls(void)
{
	FILE *f = fopen(SYSCTL_JOURNAL, "r");

	struct { char path[256]; int v; } saved[16];
	int n = 0;

	if (!f)
		return;
	while (n < 16 && fscanf(f, "%255s %d", saved[n].path, &saved[n].v) == 2)
		n++;
	fclose(f);
	/* Newest first, so that each path ends at the first value noted */
	while (n-- > 0)
		write_int_file(saved[n].path, saved[n].v);
	unlink(SYSCTL_JOURNAL);
}

static void __attribute__((destructor)) restore_sysctls_at_exit(void)
{
	restore_sysctls();
}

static int set_sysctl(const char *path, int v)
{
	int old = read_int_file(path);
	FILE *f;

	if (old == -1 && access(path, F_OK))
		return -ENOENT;
	f = fopen(SYSCTL_JOURNAL, "a");
	if (!f)
		return -errno;
	/* Only the first (original) value of a path counts when restoring */
	fprintf(f, "%s %d\n", path, old);
	if (fflush(f) || fsync(fileno(f))) {
		fclose(f);
		return -EIO;
	}
	fclose(f);
	return write_int_file(path, v);
}

/*
 * The 6.1 harness runs the test body even when FIXTURE_SETUP skipped, so
 * every test starts with this.
 */
#define REQUIRE_MMAP3() do {						\
		if (self->ev.fd < 0)					\
			SKIP(return, "kernel has no MMAP3 (%s missing)",	\
			     PERF_MMAP3_CAP_PATH);			\
	} while (0)

#define MAX_KIDS	4
#define MAX_MOUNTS	4

FIXTURE(mmap3) {
	char dir[64];
	struct mmap3_event ev;
	struct rec_list recs;
	/* Cleaned up by FIXTURE_TEARDOWN, also after a failed ASSERT */
	struct fuse_backing fuse;	/* a FUSE mount and its daemon */
	struct fuse_backing venus;	/* a Coda mount and its cache manager */
	pid_t kids[MAX_KIDS];		/* children not reaped yet */
	char mounts[MAX_MOUNTS][PATH_MAX];	/* detached last first */
	int nr_mounts;
};

/*
 * Children killed and reaped by FIXTURE_TEARDOWN.  A test that reaps one
 * itself goes through reap_kid(), which forgets it, so that no pid the
 * kernel has handed to someone else since is ever killed.
 */
static void note_kid(FIXTURE_DATA(mmap3) *self, pid_t pid)
{
	int i;

	for (i = 0; i < MAX_KIDS; i++)
		if (!self->kids[i]) {
			self->kids[i] = pid;
			return;
		}
	kill(pid, SIGKILL);
	abort();
}

/* wait_exit() for a noted child; 1: reaped and forgotten */
static int reap_kid(FIXTURE_DATA(mmap3) *self, pid_t pid, int *status,
		    int timeout_ms)
{
	int i, ret = wait_exit(pid, status, timeout_ms);

	if (ret == 1)
		for (i = 0; i < MAX_KIDS; i++)
			if (self->kids[i] == pid)
				self->kids[i] = 0;
	return ret;
}

static void note_mount(FIXTURE_DATA(mmap3) *self, const char *path)
{
	if (self->nr_mounts == MAX_MOUNTS)
		abort();
	snprintf(self->mounts[self->nr_mounts++], PATH_MAX, "%s", path);
}

/*
 * Children first get SIGKILL; stopping the FUSE daemon and the Coda cache
 * manager then ends every request they may wait for; only then can they
 * all be reaped.
 */
static void clean_up_kids_and_mounts(FIXTURE_DATA(mmap3) *self)
{
	int i, status;

	for (i = 0; i < MAX_KIDS; i++)
		if (self->kids[i])
			kill(self->kids[i], SIGKILL);
	fuse_backing_stop(&self->fuse, 10 * 1000);
	fuse_backing_stop(&self->venus, 10 * 1000);
	for (i = 0; i < MAX_KIDS; i++) {
		if (!self->kids[i])
			continue;
		if (reap_kid(self, self->kids[i], &status, 60 * 1000) != 1)
			fprintf(stderr, "# child %d not reaped 60 s after SIGKILL and FUSE abort\n",
				self->kids[i]);
	}
	while (self->nr_mounts > 0)
		umount2(self->mounts[--self->nr_mounts], MNT_DETACH);
}

FIXTURE_SETUP(mmap3)
{
	int err;

	self->ev.fd = -1;
	fuse_backing_init(&self->fuse);
	fuse_backing_init(&self->venus);
	restore_sysctls();	/* left by a test that timed out */
	if (!mmap3_supported())
		SKIP(return, "kernel has no MMAP3 (%s missing)", PERF_MMAP3_CAP_PATH);
	strcpy(self->dir, "/tmp/mmap3.XXXXXX");
	ASSERT_NE(NULL, mkdtemp(self->dir));
	err = mmap3_open(&self->ev, 0, -1, EV_MMAP3, RING_PAGES);
	ASSERT_EQ(0, err) TH_LOG("perf_event_open(mmap3): %s", strerror(-err));
}

FIXTURE_TEARDOWN(mmap3)
{
	clean_up_kids_and_mounts(self);
	mmap3_close(&self->ev);
	rec_list_free(&self->recs);
	if (self->dir[0])
		rm_rf(self->dir);
	restore_sysctls();
}

static void *map_file(const char *path, int prot, off_t off, size_t len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *p;

	if (fd < 0)
		return MAP_FAILED;
	p = mmap(NULL, len, prot, MAP_PRIVATE, fd, off);
	close(fd);
	return p;
}

/*
 * The MMAP3 record of the latest mapping of @path at @addr: an address is
 * reused once the previous mapping there is gone.
 */
static const struct perf_mmap3_record *
record_for(const struct rec_list *list, const char *path, void *addr)
{
	const struct perf_mmap3_record *m, *last = NULL;
	size_t from = 0;

	while ((m = find_mmap3(list, path, &from)))
		if (m->addr == (unsigned long)addr)
			last = m;
	return last;
}

/* Map @path executable and return its record, or NULL */
static const struct perf_mmap3_record *
map_and_record(struct mmap3_event *ev, struct rec_list *list, const char *path,
	       off_t off)
{
	void *p = map_file(path, PROT_READ | PROT_EXEC, off, 4096);

	if (p == MAP_FAILED)
		return NULL;
	mmap3_collect(ev, list);
	munmap(p, 4096);
	return record_for(list, path, p);
}

static void expect_build_id(struct __test_metadata *_metadata,
			    const struct perf_mmap3_record *m,
			    const struct elf_spec *spec, const char *path)
{
	unsigned char want[20], file[20];
	unsigned int want_len, file_len = 0;
	char h1[41], h2[41];

	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
	if (spec)
		elf_spec_build_id(spec, want, &want_len);
	ASSERT_TRUE(spec || file_build_id(path, want, &want_len) == 1)
		TH_LOG("libelf finds no build ID in %s", path);
	ASSERT_EQ(want_len, m->build_id_size);
	ASSERT_EQ(0, memcmp(want, m->build_id, want_len))
		TH_LOG("record %s, want %s", hex(m->build_id, m->build_id_size, h1),
		       hex(want, want_len, h2));
	/* And what libelf reads from the file now agrees */
	if (spec && file_build_id(path, file, &file_len) == 1) {
		ASSERT_EQ(want_len, file_len);
		ASSERT_EQ(0, memcmp(want, file, file_len));
	}
}

static void write_and_check(struct __test_metadata *_metadata,
			    FIXTURE_DATA(mmap3) *self, const char *name,
			    const struct elf_spec *spec)
{
	char path[PATH_MAX];

	snprintf(path, sizeof(path), "%s/%s", self->dir, name);
	ASSERT_EQ(0, elf_write(path, spec, false));
	expect_build_id(_metadata, map_and_record(&self->ev, &self->recs, path, 0),
			spec, path);
}

static void expect_status(struct __test_metadata *_metadata,
			  FIXTURE_DATA(mmap3) *self, const char *path,
			  unsigned int status)
{
	const struct perf_mmap3_record *m =
		map_and_record(&self->ev, &self->recs, path, 0);

	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(status, m->build_id_status);
	ASSERT_EQ(0, m->build_id_size);
}

/*
 * Run @path in a child that execs it only once a per-task MMAP3 event is
 * open on it.  Returns 0 and the child's pid, wait status and records, or
 * -errno if the event could not be set up.
 */
static int exec_under_event(const char *path, pid_t *pid, int *status,
			    struct rec_list *recs)
{
	struct mmap3_event ev;
	int go[2], err;

	if (pipe(go))
		return -errno;
	*pid = fork();
	if (*pid < 0)
		return -errno;
	if (!*pid) {
		char c;

		close(go[1]);
		if (read(go[0], &c, 1) != 1)
			_exit(90);
		execl(path, path, (char *)NULL);
		_exit(91);
	}
	close(go[0]);
	err = mmap3_open(&ev, *pid, -1, EV_MMAP3, RING_PAGES);
	/* Closing the pipe without a byte makes the child exit 90 */
	if (!err && write(go[1], "x", 1) != 1)
		err = -EIO;
	close(go[1]);
	if (waitpid(*pid, status, 0) != *pid && !err)
		err = -errno;
	if (!err)
		mmap3_collect(&ev, recs);
	mmap3_close(&ev);
	return err;
}

TEST_F(mmap3, exec_of_elf_reports_build_id)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x10, .executable = true };
	struct rec_list recs = { 0 };
	char path[PATH_MAX];
	int status, err;
	pid_t pid;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/prog", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	err = exec_under_event(path, &pid, &status, &recs);
	ASSERT_EQ(0, err) TH_LOG("%s", strerror(-err));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));

	expect_build_id(_metadata, find_mmap3(&recs, path, NULL), &spec, path);
	ASSERT_EQ((unsigned int)pid, find_mmap3(&recs, path, NULL)->pid);
	rec_list_free(&recs);
}

TEST_F(mmap3, dlopen_of_dso_reports_build_id)
{
	char path[PATH_MAX], real[PATH_MAX];
	const struct perf_mmap3_record *m = NULL;
	size_t from = 0;
	void *h;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/libmmap3_dso.so", exe_dir());
	ASSERT_NE(NULL, realpath(path, real)) TH_LOG("%s missing", path);
	h = dlopen(real, RTLD_NOW | RTLD_LOCAL);
	ASSERT_NE(NULL, h) TH_LOG("dlopen: %s", dlerror());
	mmap3_collect(&self->ev, &self->recs);
	/* The executable segment is the one reported */
	while ((m = find_mmap3(&self->recs, real, &from)))
		if (m->prot & PROT_EXEC)
			break;
	expect_build_id(_metadata, m, NULL, real);
	dlclose(h);
}

/*
 * How many pages of @path are in the page cache, after asking the kernel to
 * drop them if @evict; -1 if that cannot be told.  The look is a PROT_READ
 * mapping, made before the pages are dropped: a kernel that wrongly read a
 * build ID for it then still shows the pages gone, and the caller's test
 * runs instead of being skipped.
 */
static int cached_pages(const char *path, bool evict)
{
	unsigned char vec[64];
	size_t i, pages;
	struct stat st;
	int fd, n = -1;
	void *p;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	if (fstat(fd, &st) || !st.st_size)
		goto out;
	pages = (st.st_size + 4095) / 4096;
	if (pages > sizeof(vec))
		goto out;
	p = mmap(NULL, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED)
		goto out;
	/* Nothing of the mapping is faulted in, so nothing pins the pages */
	if ((!evict || !posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)) &&
	    !mincore(p, st.st_size, vec))
		for (n = 0, i = 0; i < pages; i++)
			n += vec[i] & 1;
	munmap(p, st.st_size);
out:
	close(fd);
	return n;
}

TEST_F(mmap3, cold_page_cache_reports_build_id)
{
	const struct perf_mmap3_record *m;
	struct mmap3_event stock;
	struct rec_list stock_recs = { 0 };
	char path[PATH_MAX];
	size_t i;
	int n;

	REQUIRE_MMAP3();
	/* Built on the host and shared read-only over 9p: not in tmpfs */
	snprintf(path, sizeof(path), "%s/fixtures/cold.elf", exe_dir());
	n = cached_pages(path, true);
	ASSERT_LE(0, n) TH_LOG("%s: cannot tell which of its pages are cached", path);
	if (n)
		SKIP(return, "%d pages of %.900s stay cached", n, path);

	/* For contrast: stock MMAP2 + build_id on the same mapping */
	ASSERT_EQ(0, mmap3_open(&stock, 0, -1, EV_MMAP | EV_MMAP2 | EV_BUILD_ID,
				RING_PAGES));
	m = map_and_record(&self->ev, &self->recs, path, 0);
	expect_build_id(_metadata, m, NULL, path);
	mmap3_collect(&stock, &stock_recs);
	for (i = 0; i < stock_recs.n; i++) {
		const struct rec *r = &stock_recs.v[i];
		const char *name = mmap2_filename(r);

		if (name && !strcmp(name, path))
			TH_LOG("stock MMAP2 + build_id on a cold file: %s",
			       r->hdr->misc & (1 << 14) ? "build ID" : "none");
	}
	rec_list_free(&stock_recs);
	mmap3_close(&stock);
}

TEST_F(mmap3, note_beyond_first_page_found)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x20,
				 .note_off = 3 * 4096 + 64, .size = 4 * 4096 };

	REQUIRE_MMAP3();
	write_and_check(_metadata, self, "far-note", &spec);
}

TEST_F(mmap3, program_headers_not_after_elf_header_found)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x30,
				 .phoff = 4096 + 512, .note_off = 4096 + 1024,
				 .size = 3 * 4096 };

	REQUIRE_MMAP3();
	write_and_check(_metadata, self, "far-phdrs", &spec);
}

TEST_F(mmap3, build_id_sizes_reported_exactly)
{
	static const unsigned int sizes[] = { 8, 16, 20, 1 };
	unsigned int i;

	REQUIRE_MMAP3();
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		struct elf_spec spec = { .id_len = sizes[i], .id_seed = 0x40 + i };
		char name[32];

		snprintf(name, sizeof(name), "size%u", sizes[i]);
		write_and_check(_metadata, self, name, &spec);
	}
}

TEST_F(mmap3, elf32_found)
{
	struct elf_spec spec = { .elf32 = true, .id_len = 20, .id_seed = 0x50 };

	REQUIRE_MMAP3();
	write_and_check(_metadata, self, "elf32", &spec);
	spec.id_len = 16;
	write_and_check(_metadata, self, "elf32-md5", &spec);
}

TEST_F(mmap3, elf_without_build_id_says_no_note)
{
	struct elf_spec spec = { .id_len = 0 };
	char path[PATH_MAX];

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/no-id", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	expect_status(_metadata, self, path, PERF_MMAP3_BUILD_ID_NO_NOTE);
}

TEST_F(mmap3, non_elf_exec_mapping_says_not_elf)
{
	char path[PATH_MAX];
	int fd;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/script", self->dir);
	fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0755);
	ASSERT_GE(fd, 0);
	ASSERT_EQ(20, write(fd, "#!/bin/sh\necho hi\n\n\n", 20));
	close(fd);
	expect_status(_metadata, self, path, PERF_MMAP3_BUILD_ID_NOT_ELF);
}

/* Put a note at @off of @buf; returns the offset after it */
static size_t put_note(char *buf, size_t off, const char *name, uint32_t type,
		       const unsigned char *desc, uint32_t descsz)
{
	Elf64_Nhdr n = { .n_namesz = strlen(name) + 1, .n_descsz = descsz,
			 .n_type = type };

	memcpy(buf + off, &n, sizeof(n));
	off += sizeof(n);
	memcpy(buf + off, name, n.n_namesz);
	off += (n.n_namesz + 3) & ~3u;
	if (descsz)
		memcpy(buf + off, desc, descsz);
	return off + ((descsz + 3) & ~3u);
}

/*
 * A valid ELF64 file at @path whose build ID (@id, 20 bytes) is hard work
 * to find: with @segments > 1, its program headers are in page 5 and each
 * of its @segments PT_NOTE segments in a page of its own, the build ID in
 * the last (every segment costs the reader two page lookups); otherwise
 * one PT_NOTE segment holds @notes - 1 other notes before the build ID.
 */
static int write_laborious_elf(const char *path, unsigned int segments,
			       unsigned int notes, const unsigned char *id)
{
	size_t phoff = segments > 1 ? 5 * 4096 : sizeof(Elf64_Ehdr);
	size_t size = (6 + segments) * 4096 + notes * 16 + 4096, off;
	Elf64_Ehdr *e;
	Elf64_Phdr *ph;
	unsigned int i;
	char *buf = calloc(1, size);
	int fd, ret = -1;

	if (!buf)
		return -1;
	e = (Elf64_Ehdr *)buf;
	memcpy(e->e_ident, ELFMAG, SELFMAG);
	e->e_ident[EI_CLASS] = ELFCLASS64;
	e->e_ident[EI_DATA] = ELFDATA2LSB;
	e->e_ident[EI_VERSION] = EV_CURRENT;
	e->e_type = ET_DYN;
	e->e_machine = EM_X86_64;
	e->e_version = EV_CURRENT;
	e->e_phoff = phoff;
	e->e_ehsize = sizeof(*e);
	e->e_phentsize = sizeof(*ph);
	e->e_phnum = segments;
	ph = (Elf64_Phdr *)(buf + phoff);
	for (i = 0; i < segments; i++) {
		size_t start = segments > 1 ? (6 + i) * 4096 : 4096;

		off = start;
		if (i + 1 < segments)
			off = put_note(buf, off, "XYZ", 1, id, 4);
		for (; segments == 1 && off < start + (notes - 1) * 16;)
			off = put_note(buf, off, "XYZ", 1, NULL, 0);
		if (i + 1 == segments)
			off = put_note(buf, off, "GNU", NT_GNU_BUILD_ID, id, 20);
		ph[i].p_type = PT_NOTE;
		ph[i].p_offset = start;
		ph[i].p_filesz = off - start;
		ph[i].p_align = 4;
	}
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (fd >= 0 && write(fd, buf, size) == (ssize_t)size)
		ret = 0;
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

/*
 * The reader bounds its work (notes walked, pages looked up).  A valid file
 * that needs more is not malformed: its record may say UNAVAILABLE, or give
 * the right build ID, never MALFORMED or any other claim about the file.
 * libelf reads each file's build ID first, to show the file is valid.
 */
TEST_F(mmap3, work_limits_never_call_a_valid_file_malformed)
{
	static const struct { unsigned int segments, notes; } files[] = {
		{ 31, 1 }, { 32, 1 }, { 40, 1 }, { 1, 511 }, { 1, 512 }, { 1, 600 },
	};
	const struct perf_mmap3_record *m;
	unsigned char id[20], got[20];
	unsigned int i, j, len;
	char path[PATH_MAX], h1[41], h2[41];

	REQUIRE_MMAP3();
	for (j = 0; j < sizeof(id); j++)
		id[j] = 0xa0 + j;
	for (i = 0; i < ARRAY_SIZE(files); i++) {
		snprintf(path, sizeof(path), "%s/laborious-%u-%u.so", self->dir,
			 files[i].segments, files[i].notes);
		ASSERT_EQ(0, write_laborious_elf(path, files[i].segments,
						 files[i].notes, id));
		ASSERT_EQ(1, file_build_id(path, got, &len))
			TH_LOG("test invalid: libelf finds no build ID in %s", path);
		ASSERT_TRUE(len == sizeof(id) && !memcmp(got, id, len));

		m = map_and_record(&self->ev, &self->recs, path, 0);
		ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
		ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
		TH_LOG("%u segments, %u notes: status %u", files[i].segments,
		       files[i].notes, m->build_id_status);
		if (m->build_id_status == PERF_MMAP3_BUILD_ID_UNAVAILABLE)
			continue;
		ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status)
			TH_LOG("%s is a valid ELF file with build ID %s", path,
			       hex(id, sizeof(id), h1));
		ASSERT_EQ(sizeof(id), m->build_id_size);
		ASSERT_EQ(0, memcmp(id, m->build_id, sizeof(id)))
			TH_LOG("record %s, file %s", hex(m->build_id, 20, h1),
			       hex(id, sizeof(id), h2));
	}
}

TEST_F(mmap3, malicious_elf_says_malformed)
{
	static const enum elf_damage damage[] = {
		ELF_HUGE_PHNUM, ELF_NOTE_PAST_EOF, ELF_NAMESZ_OVERFLOW,
		ELF_DESCSZ_OVERFLOW, ELF_OVERSIZE_ID, ELF_TRUNCATED,
	};
	unsigned int i;

	REQUIRE_MMAP3();
	for (i = 0; i < ARRAY_SIZE(damage); i++) {
		struct elf_spec spec = { .id_len = 20, .damage = damage[i] };
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/bad%u", self->dir, i);
		ASSERT_EQ(0, elf_write(path, &spec, false));
		expect_status(_metadata, self, path, PERF_MMAP3_BUILD_ID_MALFORMED);
	}
}

TEST_F(mmap3, mapping_with_pgoff_reports_offset_and_build_id)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x60, .size = 4 * 4096 };
	const struct perf_mmap3_record *m;
	char path[PATH_MAX];

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/pgoff", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	m = map_and_record(&self->ev, &self->recs, path, 2 * 4096);
	expect_build_id(_metadata, m, &spec, path);
	ASSERT_EQ(2 * 4096, m->pgoff);
	ASSERT_EQ(4096, m->len);
}

TEST_F(mmap3, rename_replace_gives_new_build_id)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x70 };
	struct elf_spec v2 = { .id_len = 20, .id_seed = 0x90 };
	const struct perf_mmap3_record *m1, *m2;
	char path[PATH_MAX];

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/libreplaced.so", self->dir);
	ASSERT_EQ(0, elf_write(path, &v1, false));
	m1 = map_and_record(&self->ev, &self->recs, path, 0);
	expect_build_id(_metadata, m1, &v1, path);
	ASSERT_EQ(0, elf_write(path, &v2, true));
	m2 = map_and_record(&self->ev, &self->recs, path, 0);
	expect_build_id(_metadata, m2, &v2, path);
	/* One path, two files: the records tell them apart both ways */
	ASSERT_STREQ(m1->filename, m2->filename);
	ASSERT_NE(m1->ino, m2->ino);
	ASSERT_NE(0, memcmp(m1->build_id, m2->build_id, 20));
}

TEST_F(mmap3, rewrite_in_place_gives_new_build_id)
{
	const struct perf_mmap3_record *m, *first = NULL;
	char path[PATH_MAX];
	int i;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/librewritten.so", self->dir);
	/* Back to back, well within one timestamp tick */
	for (i = 0; i < 32; i++) {
		struct elf_spec v = { .id_len = 20, .id_seed = 0x11 * (i % 3 + 1) };

		int err = i ? elf_rewrite_in_place(path, &v) :
			      elf_write(path, &v, false);

		ASSERT_EQ(0, err);
		m = map_and_record(&self->ev, &self->recs, path, 0);
		expect_build_id(_metadata, m, &v, path);
		if (!first)
			first = m;
		ASSERT_EQ(first->ino, m->ino);
	}
}

TEST_F(mmap3, mprotect_adding_exec_reports_build_id)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xa0 };
	char path[PATH_MAX];
	void *p;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/mprotect", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	p = map_file(path, PROT_READ, 0, 4096);
	ASSERT_NE(MAP_FAILED, p);
	mmap3_collect(&self->ev, &self->recs);
	ASSERT_EQ(0, count_records(&self->recs, PERF_MMAP3_RECORD_TYPE, path));
	ASSERT_EQ(0, mprotect(p, 4096, PROT_READ | PROT_EXEC));
	mmap3_collect(&self->ev, &self->recs);
	munmap(p, 4096);
	ASSERT_EQ(1, count_records(&self->recs, PERF_MMAP3_RECORD_TYPE, path));
	expect_build_id(_metadata, record_for(&self->recs, path, p), &spec, path);
}

static int vdso_range(unsigned long *start, unsigned long *end)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[512];
	int ret = -1;

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, "[vdso]") &&
		    sscanf(line, "%lx-%lx", start, end) == 2) {
			ret = 0;
			break;
		}
	fclose(f);
	return ret;
}

TEST_F(mmap3, vdso_carries_image_build_id)
{
	unsigned char want[20];
	unsigned int want_len;
	unsigned long start, end;
	struct rec_list recs = { 0 };
	const struct perf_mmap3_record *m;
	char h1[41], h2[41];
	int status;
	pid_t pid;

	REQUIRE_MMAP3();
	ASSERT_EQ(0, vdso_range(&start, &end));
	ASSERT_EQ((unsigned long)getauxval(AT_SYSINFO_EHDR), start);
	ASSERT_EQ(1, mem_build_id((void *)start, end - start, want, &want_len));

	ASSERT_EQ(0, exec_under_event("/bin/true", &pid, &status, &recs));
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status));
	m = find_mmap3(&recs, "[vdso]", NULL);
	ASSERT_NE(NULL, m);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
	ASSERT_EQ(want_len, m->build_id_size);
	ASSERT_EQ(0, memcmp(want, m->build_id, want_len))
		TH_LOG("record %s, image %s", hex(m->build_id, m->build_id_size, h1),
		       hex(want, want_len, h2));
	/* Anonymous mappings are not reported without mmap_data */
	ASSERT_EQ(NULL, find_mmap3(&recs, "//anon", NULL));
	rec_list_free(&recs);
}

TEST_F(mmap3, mmap2_and_mmap3_together)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xb0 };
	struct mmap3_event both, mmap2;
	struct rec_list both_recs = { 0 }, mmap2_recs = { 0 };
	char path[PATH_MAX];
	void *p;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/both", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));

	/* One event asking for all three gets MMAP3 only */
	ASSERT_EQ(0, mmap3_open(&both, 0, -1, EV_MMAP | EV_MMAP2 | EV_MMAP3,
				RING_PAGES));
	/* A separate MMAP2 + build_id event keeps getting MMAP2 */
	ASSERT_EQ(0, mmap3_open(&mmap2, 0, -1, EV_MMAP | EV_MMAP2 | EV_BUILD_ID,
				RING_PAGES));
	p = map_file(path, PROT_READ | PROT_EXEC, 0, 4096);
	ASSERT_NE(MAP_FAILED, p);
	munmap(p, 4096);
	mmap3_collect(&both, &both_recs);
	mmap3_collect(&mmap2, &mmap2_recs);

	ASSERT_EQ(1, count_records(&both_recs, PERF_MMAP3_RECORD_TYPE, path));
	ASSERT_EQ(0, count_records(&both_recs, PERF_RECORD_MMAP2, path));
	ASSERT_EQ(0, count_records(&both_recs, PERF_RECORD_MMAP, path));
	expect_build_id(_metadata, find_mmap3(&both_recs, path, NULL), &spec, path);
	/* The MMAP2 event's misc bit does not leak into the MMAP3 record */
	ASSERT_EQ(0, find_mmap3(&both_recs, path, NULL)->header.misc &
		     PERF_RECORD_MISC_MMAP_BUILD_ID);

	ASSERT_EQ(1, count_records(&mmap2_recs, PERF_RECORD_MMAP2, path));
	ASSERT_EQ(0, count_records(&mmap2_recs, PERF_MMAP3_RECORD_TYPE, path));

	/* build_id asks for the MMAP2 layout: contradictory with mmap3 */
	ASSERT_EQ(-EINVAL, mmap3_open_fd(0, -1, EV_MMAP3 | EV_BUILD_ID));

	rec_list_free(&both_recs);
	rec_list_free(&mmap2_recs);
	mmap3_close(&both);
	mmap3_close(&mmap2);
}

/*
 * Two MMAP2 events on one task, only the second opened with build_id: the
 * kernel writes the records newest event first, and on 6.1.192 (and 6.18)
 * the build_id event leaves PERF_RECORD_MISC_MMAP_BUILD_ID set in the shared
 * header, so the other event's record, which carries maj/min/ino, claims to
 * carry a build ID.  Fixed by the series' first patch.
 */
TEST_F(mmap3, mmap2_build_id_misc_bit_stays_with_its_event)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xb4 };
	struct mmap3_event plain, with_id;
	struct rec_list plain_recs = { 0 }, id_recs = { 0 };
	char path[PATH_MAX];
	size_t i, n = 0, leaked = 0;
	void *p;

	/* It runs where the fixture found no MMAP3 too, and made no dir */
	if (!self->dir[0]) {
		strcpy(self->dir, "/tmp/mmap3.XXXXXX");
		ASSERT_NE(NULL, mkdtemp(self->dir));
	}
	snprintf(path, sizeof(path), "%s/misc", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	ASSERT_EQ(0, mmap3_open(&plain, 0, -1, EV_MMAP | EV_MMAP2, RING_PAGES));
	ASSERT_EQ(0, mmap3_open(&with_id, 0, -1, EV_MMAP | EV_MMAP2 | EV_BUILD_ID,
				RING_PAGES));
	p = map_file(path, PROT_READ | PROT_EXEC, 0, 4096);
	ASSERT_NE(MAP_FAILED, p);
	munmap(p, 4096);
	mmap3_collect(&plain, &plain_recs);
	mmap3_collect(&with_id, &id_recs);

	/* The build_id event's record has the bit, which is right */
	for (i = 0; i < id_recs.n; i++) {
		const struct rec *r = &id_recs.v[i];

		if (r->hdr->type == PERF_RECORD_MMAP2 && !strcmp(mmap2_filename(r), path))
			ASSERT_NE(0, r->hdr->misc & PERF_RECORD_MISC_MMAP_BUILD_ID);
	}
	for (i = 0; i < plain_recs.n; i++) {
		const struct rec *r = &plain_recs.v[i];

		if (r->hdr->type != PERF_RECORD_MMAP2 || strcmp(mmap2_filename(r), path))
			continue;
		n++;
		if (r->hdr->misc & PERF_RECORD_MISC_MMAP_BUILD_ID)
			leaked++;
	}
	rec_list_free(&plain_recs);
	rec_list_free(&id_recs);
	mmap3_close(&plain);
	mmap3_close(&with_id);
	ASSERT_EQ(1, n);
	if (leaked && self->ev.fd < 0)
		SKIP(return, "this kernel (no MMAP3 series) has the bug: an MMAP2 record without a build ID claims one");
	ASSERT_EQ(0, leaked);
}

/* A BPF socket filter that returns 0, or -errno */
static int load_bpf_prog(void)
{
	struct bpf_insn insns[] = {
		{ .code = BPF_ALU64 | BPF_MOV | BPF_K, .dst_reg = BPF_REG_0 },
		{ .code = BPF_JMP | BPF_EXIT },
	};
	union bpf_attr attr;
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.prog_type = BPF_PROG_TYPE_SOCKET_FILTER;
	attr.insns = (uintptr_t)insns;
	attr.insn_cnt = ARRAY_SIZE(insns);
	attr.license = (uintptr_t)"GPL";
	fd = syscall(__NR_bpf, BPF_PROG_LOAD, &attr, sizeof(attr));
	return fd < 0 ? -errno : fd;
}

/*
 * Two events on one task that follow BPF programs: the kernel writes each
 * KSYMBOL and BPF_EVENT record into them in turn, and on 6.1.192 (and
 * 6.18) grows the shared header by each event's sample_id without
 * restoring it, so the second event's records are longer than what is
 * written in them and a tool reads their sample_id from the ring buffer's
 * old bytes.  Fixed by the series' second patch.
 */
TEST_F(mmap3, ksymbol_and_bpf_event_sizes_stay_with_their_event)
{
	struct rec_list recs[2] = { { 0 }, { 0 } };
	size_t ksymbols[2] = { 0 }, loads[2] = { 0 }, grown = 0;
	struct mmap3_event ev[2];
	int i, prog;
	size_t k;

	for (i = 0; i < 2; i++)
		ASSERT_EQ(0, mmap3_open(&ev[i], 0, -1, EV_BPF, RING_PAGES));
	prog = load_bpf_prog();
	if (prog < 0) {
		mmap3_close(&ev[0]);
		mmap3_close(&ev[1]);
		SKIP(return, "no BPF program can be loaded here: %s", strerror(-prog));
	}
	close(prog);
	for (i = 0; i < 2; i++) {
		mmap3_collect(&ev[i], &recs[i]);
		for (k = 0; k < recs[i].n; k++) {
			const struct perf_event_header *h = recs[i].v[k].hdr;
			/* the header, then 16 bytes; KSYMBOL's name, padded */
			size_t body = sizeof(*h) + 16;

			if (h->type == PERF_RECORD_KSYMBOL) {
				const char *name = (const char *)h + body;

				ASSERT_LT(body, h->size);
				body += (strnlen(name, h->size - body) + 8) & ~7UL;
				ksymbols[i]++;
			} else if (h->type == PERF_RECORD_BPF_EVENT) {
				loads[i]++;
			} else {
				continue;
			}
			ASSERT_LE(body + MMAP3_SAMPLE_ID_SIZE, h->size);
			if (h->size != body + MMAP3_SAMPLE_ID_SIZE) {
				TH_LOG("event %d: a record of type %u is %u bytes, %zu written",
				       i, h->type, h->size, body + MMAP3_SAMPLE_ID_SIZE);
				grown++;
			}
		}
	}
	for (i = 0; i < 2; i++) {
		rec_list_free(&recs[i]);
		mmap3_close(&ev[i]);
	}
	if (grown && self->ev.fd < 0)
		SKIP(return, "this kernel (no MMAP3 series) has the bug: records longer than written");
	ASSERT_EQ(0, grown);
	ASSERT_LE(1, ksymbols[0]);
	ASSERT_EQ(ksymbols[0], ksymbols[1]);
	ASSERT_LE(1, loads[0]);
	ASSERT_EQ(loads[0], loads[1]);
}

TEST_F(mmap3, reserved_bits_beside_mmap3_rejected)
{
	struct perf_event_attr attr;
	int bit, fd;

	REQUIRE_MMAP3();
	for (bit = 38; bit < PERF_MMAP3_ATTR_BIT; bit++) {
		memset(&attr, 0, sizeof(attr));
		attr.size = sizeof(attr);
		attr.type = PERF_TYPE_SOFTWARE;
		attr.config = PERF_COUNT_SW_DUMMY;
		attr.exclude_kernel = 1;
		*(uint64_t *)((char *)&attr + PERF_MMAP3_ATTR_FLAGS_OFFSET) |=
			1ULL << bit;
		perf_mmap3_attr_set(&attr);
		fd = syscall(__NR_perf_event_open, &attr, 0, -1, -1, 0);
		ASSERT_EQ(-1, fd) TH_LOG("reserved bit %d accepted", bit);
		ASSERT_EQ(EINVAL, errno);
	}
	/* The capability reads as the ABI version */
	ASSERT_EQ(PERF_MMAP3_ABI_VERSION, read_int_file(PERF_MMAP3_CAP_PATH));
}

/*
 * memfd files are written through a file that never took write access, so
 * the kernel cannot learn of rewrites: their build IDs are read anew for
 * every mapping.
 */
TEST_F(mmap3, memfd_rewritten_gives_new_build_id)
{
	const char *name = "/memfd:mmap3-test (deleted)";
	const struct perf_mmap3_record *m;
	int fd, i;

	REQUIRE_MMAP3();
	fd = memfd_create("mmap3-test", MFD_CLOEXEC);
	ASSERT_GE(fd, 0);
	for (i = 0; i < 4; i++) {
		struct elf_spec v = { .id_len = 20, .id_seed = 0x30 + 0x21 * i };
		void *p;

		ASSERT_EQ(0, ftruncate(fd, 0));
		ASSERT_EQ(0, elf_write_fd(fd, &v));
		p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
		ASSERT_NE(MAP_FAILED, p);
		mmap3_collect(&self->ev, &self->recs);
		munmap(p, 4096);
		m = record_for(&self->recs, name, p);
		ASSERT_NE(NULL, m) TH_LOG("no record for %s", name);
		ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
		ASSERT_EQ(v.id_seed, m->build_id[0]) TH_LOG("mapping %d", i);
	}
	close(fd);
}

/*
 * overlayfs installs the real file in the VMA: the build ID is captured
 * for that inode, before and after a copy-up.
 */
TEST_F(mmap3, overlayfs_mapping_reports_build_id)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x51 };
	struct elf_spec v2 = { .id_len = 20, .id_seed = 0x62 };
	char lower[PATH_MAX], upper[PATH_MAX], work[PATH_MAX], merged[PATH_MAX];
	char opts[4 * PATH_MAX], path[PATH_MAX + 16], lowerlib[PATH_MAX + 16];

	REQUIRE_MMAP3();
	snprintf(lower, sizeof(lower), "%s/lower", self->dir);
	snprintf(upper, sizeof(upper), "%s/upper", self->dir);
	snprintf(work, sizeof(work), "%s/work", self->dir);
	snprintf(merged, sizeof(merged), "%s/merged", self->dir);
	ASSERT_EQ(0, mkdir(lower, 0755));
	ASSERT_EQ(0, mkdir(upper, 0755));
	ASSERT_EQ(0, mkdir(work, 0755));
	ASSERT_EQ(0, mkdir(merged, 0755));
	snprintf(lowerlib, sizeof(lowerlib), "%s/lib.so", lower);
	ASSERT_EQ(0, elf_write(lowerlib, &v1, false));
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s",
		 lower, upper, work);
	if (mount("overlay", merged, "overlay", 0, opts)) {
		if (errno == ENODEV || errno == EPERM)
			SKIP(return, "no overlayfs here: %s", strerror(errno));
		ASSERT_EQ(0, errno);
	}
	snprintf(path, sizeof(path), "%s/lib.so", merged);
	expect_build_id(_metadata, map_and_record(&self->ev, &self->recs, path, 0),
			&v1, path);
	/* Writing through the overlay copies the file up, then rewrites it */
	ASSERT_EQ(0, elf_rewrite_in_place(path, &v2));
	expect_build_id(_metadata, map_and_record(&self->ev, &self->recs, path, 0),
			&v2, path);
	ASSERT_EQ(0, umount(merged));
}

/*
 * FUSE mounts served by selftests/fuse_backing, in the test's directory:
 * BACKING is what "another machine" changes, MNT what this kernel sees.
 * Returns false if the test was skipped (no FUSE in this kernel).
 */
static bool start_fuse(struct __test_metadata *_metadata,
		       FIXTURE_DATA(mmap3) *self, const char *hang,
		       unsigned int flags, char backing[PATH_MAX],
		       char mnt[PATH_MAX])
{
	char daemon[PATH_MAX];
	const char *problem;

	if (access("/dev/fuse", R_OK | W_OK))
		SKIP(return false, "no FUSE here (/dev/fuse: %s)", strerror(errno));
	snprintf(backing, PATH_MAX, "%s/backing", self->dir);
	snprintf(mnt, PATH_MAX, "%s/mnt", self->dir);
	snprintf(daemon, sizeof(daemon), "%s/fuse_backing", exe_dir());
	if (access(daemon, X_OK))
		SKIP(return false, "no %.900s (built only with libfuse3): %s",
		     daemon, strerror(errno));
	ASSERT_EQ(0, mkdir(backing, 0755) || mkdir(mnt, 0755))
		TH_LOG("mkdir: %s", strerror(errno));
	problem = fuse_backing_start(&self->fuse, daemon, backing, mnt, hang, flags,
				     60 * 1000);
	ASSERT_EQ(NULL, problem) TH_LOG("%s", problem);
	return true;
}

/* The build ID of @path as read() returns it, parsed by libelf */
static int build_id_by_read(const char *path, unsigned char *id,
			    unsigned int *len)
{
	size_t size = 0, cap = 1 << 16;
	char *buf = malloc(cap);
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret = -1;
	ssize_t n;

	if (fd < 0 || !buf)
		goto out;
	while ((n = read(fd, buf + size, cap - size)) > 0) {
		size += n;
		if (size == cap)
			goto out;	/* our fixtures are smaller */
	}
	if (!n)
		ret = mem_build_id(buf, size, id, len);
out:
	if (fd >= 0)
		close(fd);
	free(buf);
	return ret;
}

/*
 * Map @path the way the dynamic loader maps a library, read() of its first
 * page then mmap() of the same open file, and return the MMAP3 record.  On
 * FUSE, whose files are read for their build ID from the page cache only,
 * and where an open drops that cache, the read() is what brings the note in.
 */
static const struct perf_mmap3_record *
read_map_and_record(struct mmap3_event *ev, struct rec_list *list,
		    const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	char buf[4096];
	void *p;

	if (fd < 0)
		return NULL;
	if (read(fd, buf, sizeof(buf)) <= 0) {
		close(fd);
		return NULL;
	}
	p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	mmap3_collect(ev, list);
	munmap(p, 4096);
	return record_for(list, path, p);
}

/*
 * A file on a network filesystem changes without this kernel ever giving
 * anyone write access to it: another machine rewrote it.  FUSE stands for
 * NFS here, its backing file rewritten in place behind the kernel's back.
 * Once a read() through the mount returns the new contents, a mapping must
 * not be reported with the build ID of the old ones: the new build ID, or
 * no build ID at all.
 */
TEST_F_TIMEOUT(mmap3, fuse_remote_rewrite_never_serves_old_build_id, 300)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x13 };
	struct elf_spec v2 = { .id_len = 20, .id_seed = 0x37 };
	char backing[PATH_MAX], mnt[PATH_MAX];
	char lib[PATH_MAX + 16], path[PATH_MAX + 16], h1[41], h2[41];
	unsigned char old_id[20], new_id[20], seen[20];
	unsigned int old_len, new_len, seen_len = 0;
	const struct perf_mmap3_record *m1, *m2;

	REQUIRE_MMAP3();
	if (!start_fuse(_metadata, self, NULL, 0, backing, mnt))
		return;
	snprintf(lib, sizeof(lib), "%s/lib.so", backing);
	snprintf(path, sizeof(path), "%s/lib.so", mnt);
	elf_spec_build_id(&v1, old_id, &old_len);
	elf_spec_build_id(&v2, new_id, &new_len);

	ASSERT_EQ(0, elf_write(lib, &v1, false));
	m1 = read_map_and_record(&self->ev, &self->recs, path);
	expect_build_id(_metadata, m1, &v1, path);

	/* The other machine: same file, same size, new contents */
	ASSERT_EQ(0, elf_rewrite_in_place(lib, &v2));
	ASSERT_EQ(1, build_id_by_read(path, seen, &seen_len));
	ASSERT_TRUE(seen_len == new_len && !memcmp(seen, new_id, new_len))
		TH_LOG("test invalid: read() through %s still returns build ID %s after the backing file changed to %s",
		       mnt, hex(seen, seen_len, h1), hex(new_id, new_len, h2));

	m2 = read_map_and_record(&self->ev, &self->recs, path);
	ASSERT_NE(NULL, m2) TH_LOG("no MMAP3 record for the second mapping of %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m2->header, true));
	/* One FUSE inode throughout: the kernel was not told of the change */
	ASSERT_EQ(m1->ino, m2->ino);
	if (m2->build_id_status != PERF_MMAP3_BUILD_ID_FOUND) {
		TH_LOG("second mapping: no build ID, status %u", m2->build_id_status);
		return;
	}
	ASSERT_FALSE(m2->build_id_size == old_len &&
		     !memcmp(m2->build_id, old_id, old_len))
		TH_LOG("the record carries build ID %s, which %s had before it was rewritten (it has %s now)",
		       hex(old_id, old_len, h1), path, hex(new_id, new_len, h2));
	ASSERT_EQ(new_len, m2->build_id_size);
	ASSERT_EQ(0, memcmp(m2->build_id, new_id, new_len))
		TH_LOG("record %s, file %s", hex(m2->build_id, m2->build_id_size, h1),
		       hex(new_id, new_len, h2));
}

/* 1: a byte arrived on @fd within @timeout_ms; 0: it did not; -1: EOF, error */
static int read_byte(int fd, int timeout_ms)
{
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	char c;

	if (poll(&pfd, 1, timeout_ms) <= 0)
		return 0;
	return read(fd, &c, 1) == 1 ? 1 : -1;
}

/*
 * A child that opens @path, says so on @ready, waits for the go byte on @go
 * and maps the file executable.  Exit status 0: mmap() returned a mapping,
 * 23: it returned an error; 20-22: the child could not get that far.
 */
static void mapper_child(pid_t parent, const char *path, int ready, int go)
{
	void *p;
	char c;
	int fd;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(20);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		_exit(21);
	if (write(ready, "o", 1) != 1 || read(go, &c, 1) != 1)
		_exit(22);
	p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	_exit(p == MAP_FAILED ? 23 : 0);
}

/* /proc/@pid/@name's first line into @buf ("?" if unreadable) */
static const char *proc_line(pid_t pid, const char *name, char *buf, size_t size)
{
	char path[64];
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", pid, name);
	snprintf(buf, size, "?");
	f = fopen(path, "r");
	if (!f)
		return buf;
	if (!fgets(buf, size, f))
		snprintf(buf, size, "?");
	buf[strcspn(buf, "\n")] = '\0';
	fclose(f);
	return buf;
}

/*
 * A child that opens @path and read()s its first page, which the FUSE daemon
 * holds: until it is killed, that page is in the page cache, locked, being
 * read.  Exit status 24-25: the child could not get that far.
 */
static void hanging_reader_child(pid_t parent, const char *path)
{
	char buf[4096];
	int fd;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(24);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		_exit(25);
	_exit(read(fd, buf, sizeof(buf)) < 0 ? 26 : 0);
}

/*
 * Wait for mapper @pid, which was told to map @path, to return from mmap():
 * it must, within 60 s, and with a mapping (exit status 0).
 */
static void expect_mapper_returns(struct __test_metadata *_metadata,
				  FIXTURE_DATA(mmap3) *self, pid_t pid,
				  const char *path)
{
	char line[512];
	int status, r;

	r = reap_kid(self, pid, &status, 60 * 1000);
	ASSERT_EQ(1, r)
		TH_LOG("mapper %d still inside mmap() of %s 60 s on (wchan %s, stat %s)",
		       pid, path, proc_line(pid, "wchan", line, 128),
		       proc_line(pid, "stat", line + 128, sizeof(line) - 128));
	ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
		TH_LOG("mapper %d: status 0x%x", pid, status);
}

/*
 * The MMAP3 record of @path in @ev's ring: present, well formed, and saying
 * the build ID is unavailable (its page was not uptodate in the cache).
 */
static void expect_unavailable(struct __test_metadata *_metadata,
			       struct mmap3_event *ev, const char *path)
{
	const struct perf_mmap3_record *m;
	struct rec_list recs = { 0 };
	char h[41];

	mmap3_collect(ev, &recs);
	m = find_mmap3(&recs, path, NULL);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_UNAVAILABLE, m->build_id_status)
		TH_LOG("status %u, build ID %s, for a file whose page was never read",
		       m->build_id_status, hex(m->build_id, m->build_id_size, h));
	rec_list_free(&recs);
}

/*
 * A file on FUSE, whose reads are answered by a daemon that here never
 * answers them (a hostile or hung one).  Any user can mount FUSE, so
 * mapping one of its files must never wait for the daemon, killably or
 * not: FUSE waits for an answer uninterruptibly once the daemon has taken
 * the request (always for ->read_folio(), for ->readahead() too when the
 * daemon asked for synchronous reads).  The build ID is looked up in the
 * page cache only: a mapping of the cold file, and one made while another
 * task's read holds the page locked, both return at once, their records
 * say the build ID is unavailable, and no read from them reaches the daemon.
 *
 * The second mapper opens the file before the read starts: FUSE's open()
 * drops the page cache (no keep_cache), which waits for a page being read
 * without a timeout.  That is FUSE's own and not what is tested here.
 */
static void fuse_mapping_never_waits(struct __test_metadata *_metadata,
				     FIXTURE_DATA(mmap3) *self, bool sync_read)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x5a };
	char backing[PATH_MAX], mnt[PATH_MAX], hang[PATH_MAX + 16];
	char path[PATH_MAX + 16], line[128];
	struct mmap3_event kev[2];
	int ready[2], go[2][2], i, who;
	pid_t kid[2], reader, parent = getpid();

	REQUIRE_MMAP3();
	if (!start_fuse(_metadata, self, "hang.so",
			sync_read ? FUSE_BACKING_SYNC_READ : 0, backing, mnt))
		return;
	snprintf(hang, sizeof(hang), "%s/hang.so", backing);
	snprintf(path, sizeof(path), "%s/hang.so", mnt);
	ASSERT_EQ(0, elf_write(hang, &spec, false));
	ASSERT_EQ(0, pipe2(ready, O_CLOEXEC));
	for (i = 0; i < 2; i++) {
		/* Each its own go pipe: the byte must reach the one it is for */
		ASSERT_EQ(0, pipe2(go[i], O_CLOEXEC));
		kid[i] = fork();
		ASSERT_GE(kid[i], 0);
		if (!kid[i])
			mapper_child(parent, path, ready[1], go[i][0]);
		note_kid(self, kid[i]);
		ASSERT_EQ(0, mmap3_open(&kev[i], kid[i], -1, EV_MMAP3, 16));
		ASSERT_EQ(1, read_byte(ready[0], 60 * 1000))
			TH_LOG("mapper %d did not open %s within 60 s", kid[i], path);
	}

	/* Nothing of the file is cached: the first mapping reads nothing */
	ASSERT_EQ(1, write(go[0][1], "g", 1));
	expect_mapper_returns(_metadata, self, kid[0], path);
	expect_unavailable(_metadata, &kev[0], path);

	/* Another task's read now holds page 0, locked and not uptodate */
	reader = fork();
	ASSERT_GE(reader, 0);
	if (!reader)
		hanging_reader_child(parent, path);
	note_kid(self, reader);
	for (who = 0; who != reader;) {
		ASSERT_EQ(1, fuse_backing_report(&self->fuse, line, sizeof(line), 60 * 1000))
			TH_LOG("the read of %s by task %d did not reach the daemon within 60 s",
			       path, reader);
		ASSERT_EQ(1, sscanf(line, "hang %d", &who)) TH_LOG("daemon said '%s'", line);
		ASSERT_NE(kid[0], who) TH_LOG("mapper %d read %s", kid[0], path);
	}
	ASSERT_EQ(1, write(go[1][1], "g", 1));
	expect_mapper_returns(_metadata, self, kid[1], path);
	expect_unavailable(_metadata, &kev[1], path);

	/* The reader still hangs; no mapper's read ever reached the daemon */
	ASSERT_EQ(0, waitpid(reader, &i, WNOHANG));
	while (fuse_backing_report(&self->fuse, line, sizeof(line), 0) == 1) {
		ASSERT_FALSE(sscanf(line, "hang %d", &who) == 1 &&
			     (who == kid[0] || who == kid[1]))
			TH_LOG("mapper %d read %s", who, path);
	}
	for (i = 0; i < 2; i++) {
		mmap3_close(&kev[i]);
		close(go[i][0]);
		close(go[i][1]);
	}
	close(ready[0]);
	close(ready[1]);
}

TEST_F_TIMEOUT(mmap3, fuse_mapping_never_waits_for_the_daemon, 300)
{
	fuse_mapping_never_waits(_metadata, self, false);
}

TEST_F_TIMEOUT(mmap3, fuse_sync_read_mapping_never_waits_for_the_daemon, 300)
{
	fuse_mapping_never_waits(_metadata, self, true);
}

/*
 * A child with an ordinary counting perf event on itself, like `perf stat`,
 * that maps @path executable.  Exit status 0: mmap() returned a mapping and
 * the counter counted; 30-33: what failed.
 */
static void counting_mapper_child(pid_t parent, const char *path)
{
	struct perf_event_attr attr;
	uint64_t count = 0;
	int ev, fd;
	void *p;

	if (prctl(PR_SET_PDEATHSIG, SIGKILL) || getppid() != parent)
		_exit(30);
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_TASK_CLOCK;
	ev = syscall(__NR_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	if (ev < 0)
		_exit(30);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		_exit(31);
	p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (p == MAP_FAILED)
		_exit(32);
	/* The event is live (its count may be 0: the guest's clock is jiffies) */
	if (read(ev, &count, sizeof(count)) != sizeof(count))
		_exit(33);
	_exit(0);
}

/*
 * Only tasks an mmap3 event can see have their build IDs read: the mapping
 * of a task that perf merely counts must not read the file.  An mmap3 event
 * exists (on the test process), and the child Q, with only a counting event
 * of its own, maps a file shared read-only over 9p whose pages were dropped
 * from the page cache: its mmap() leaves them out of the cache.  (A read
 * would bring them in, as cold_page_cache_reports_build_id shows.)
 */
TEST_F_TIMEOUT(mmap3, capture_only_for_tasks_an_mmap3_event_sees, 300)
{
	char path[PATH_MAX];
	pid_t q, parent = getpid();
	int status, n;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/fixtures/cold.elf", exe_dir());
	n = cached_pages(path, true);
	ASSERT_LE(0, n) TH_LOG("%s: cannot tell which of its pages are cached", path);
	if (n)
		SKIP(return, "%d pages of %.900s stay cached", n, path);

	q = fork();
	ASSERT_GE(q, 0);
	if (!q)
		counting_mapper_child(parent, path);
	note_kid(self, q);
	ASSERT_EQ(1, reap_kid(self, q, &status, 60 * 1000))
		TH_LOG("task %d did not return from mmap() of %s within 60 s", q, path);
	ASSERT_TRUE(WIFEXITED(status)) TH_LOG("status 0x%x", status);
	ASSERT_EQ(0, WEXITSTATUS(status));
	n = cached_pages(path, false);
	ASSERT_EQ(0, n)
		TH_LOG("mmap() by task %d, which no mmap3 event can see (only a counting event), read %d pages of %s",
		       q, n, path);
}

/* IN_ACCESS events in @fd's queue, for @wd1 and @wd2 (-1: none) */
static void count_access(int fd, int wd1, int *n1, int wd2, int *n2)
{
	union {
		struct inotify_event first;	/* for its alignment */
		char buf[4096];
	} u;
	char *buf = u.buf;
	ssize_t len;
	char *p;

	*n1 = *n2 = 0;
	while ((len = read(fd, buf, sizeof(u.buf))) > 0) {
		for (p = buf; p < buf + len;
		     p += sizeof(struct inotify_event) + ((struct inotify_event *)p)->len) {
			const struct inotify_event *e = (const void *)p;

			if (!(e->mask & IN_ACCESS))
				continue;
			if (e->wd == wd1)
				(*n1)++;
			else if (e->wd == wd2)
				(*n2)++;
		}
	}
}

static bool same_time(const struct timespec *a, const struct timespec *b)
{
	return a->tv_sec == b->tv_sec && a->tv_nsec == b->tv_nsec;
}

/*
 * The build ID of a file on overlayfs is read from the page cache of the
 * file underneath, never with a read of the overlay file (kernel_read()):
 * that would be an IN_ACCESS event for inotify, and for fanotify a
 * permission event asking a listener to approve a mapping.
 *
 * The overlay and its tmpfs are mounted strictatime, and the lower file's
 * atime is put in the past: on 6.1 a mapping does not touch the atime of a
 * file not copied up (overlayfs opens the real file O_NOATIME), so any
 * change means something read the lower file.  Copied up, the file's atime
 * changes with every mapping (ovl_mmap()), so there only inotify is asked.
 * Both witnesses are shown to see a read() at the end of each part.
 */
TEST_F(mmap3, overlay_capture_does_not_read_the_file)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x2d };
	struct elf_spec v2 = { .id_len = 20, .id_seed = 0x4e };
	const struct timespec past[2] = {
		{ .tv_sec = 1000000000 }, { .tv_nsec = UTIME_OMIT },
	};
	char top[PATH_MAX], lower[PATH_MAX + 8], upper[PATH_MAX + 8];
	char work[PATH_MAX + 8], merged[PATH_MAX + 8], opts[4 * PATH_MAX + 64];
	char path[PATH_MAX + 16], lowerlib[PATH_MAX + 16], upperlib[PATH_MAX + 16];
	const struct perf_mmap3_record *m;
	unsigned char id[20];
	unsigned int id_len;
	int fd, wd_ovl, wd_low, wd_up, n_ovl, n_other;
	struct stat before, after;

	REQUIRE_MMAP3();
	fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
	if (fd < 0 && errno == ENOSYS)
		SKIP(return, "no inotify in this kernel (CONFIG_INOTIFY_USER)");
	ASSERT_GE(fd, 0);
	snprintf(top, sizeof(top), "%s/t", self->dir);
	ASSERT_EQ(0, mkdir(top, 0755));
	ASSERT_EQ(0, mount("tmpfs", top, "tmpfs", MS_STRICTATIME, "mode=0755"))
		TH_LOG("mount tmpfs: %s", strerror(errno));
	note_mount(self, top);
	snprintf(lower, sizeof(lower), "%s/lower", top);
	snprintf(upper, sizeof(upper), "%s/upper", top);
	snprintf(work, sizeof(work), "%s/work", top);
	snprintf(merged, sizeof(merged), "%s/merged", top);
	ASSERT_EQ(0, mkdir(lower, 0755));
	ASSERT_EQ(0, mkdir(upper, 0755));
	ASSERT_EQ(0, mkdir(work, 0755));
	ASSERT_EQ(0, mkdir(merged, 0755));
	snprintf(lowerlib, sizeof(lowerlib), "%s/lib.so", lower);
	snprintf(upperlib, sizeof(upperlib), "%s/lib.so", upper);
	snprintf(path, sizeof(path), "%s/lib.so", merged);
	ASSERT_EQ(0, elf_write(lowerlib, &v1, false));
	ASSERT_EQ(0, utimensat(AT_FDCWD, lowerlib, past, 0));
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s",
		 lower, upper, work);
	if (mount("overlay", merged, "overlay", MS_STRICTATIME, opts)) {
		if (errno == ENODEV || errno == EPERM)
			SKIP(return, "no overlayfs here: %s", strerror(errno));
		ASSERT_EQ(0, errno);
	}
	note_mount(self, merged);
	wd_ovl = inotify_add_watch(fd, path, IN_ACCESS);
	wd_low = inotify_add_watch(fd, lowerlib, IN_ACCESS);
	ASSERT_GE(wd_ovl, 0);
	ASSERT_GE(wd_low, 0);
	ASSERT_EQ(0, stat(lowerlib, &before));

	/* Not copied up: the real file is the lower one */
	m = map_and_record(&self->ev, &self->recs, path, 0);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	/* Queued while mmap() ran, if at all: no waiting needed */
	count_access(fd, wd_ovl, &n_ovl, wd_low, &n_other);
	ASSERT_EQ(0, stat(lowerlib, &after));
	ASSERT_EQ(0, n_ovl) TH_LOG("mapping %s read it: IN_ACCESS on the overlay file", path);
	ASSERT_EQ(0, n_other) TH_LOG("mapping %s read the lower file: IN_ACCESS", path);
	ASSERT_TRUE(same_time(&before.st_atim, &after.st_atim))
		TH_LOG("mapping %s changed the lower file's atime: it read it", path);
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
	elf_spec_build_id(&v1, id, &id_len);
	ASSERT_EQ(id_len, m->build_id_size);
	ASSERT_EQ(0, memcmp(id, m->build_id, id_len));
	/* The witnesses see reads: libelf reads the overlay file, then ... */
	expect_build_id(_metadata, m, &v1, path);
	count_access(fd, wd_ovl, &n_ovl, wd_low, &n_other);
	ASSERT_LT(0, n_ovl) TH_LOG("inotify saw no read() of %s: the test proves nothing", path);
	/* ... the lower file directly */
	ASSERT_EQ(1, file_build_id(lowerlib, id, &id_len));
	count_access(fd, wd_ovl, &n_ovl, wd_low, &n_other);
	ASSERT_LT(0, n_other)
		TH_LOG("inotify saw no read() of %s: the test proves nothing", lowerlib);
	ASSERT_EQ(0, stat(lowerlib, &after));
	ASSERT_FALSE(same_time(&before.st_atim, &after.st_atim))
		TH_LOG("read() of %s left its atime: the test proves nothing", lowerlib);

	/* Copied up (and rewritten): the real file is the upper one */
	ASSERT_EQ(0, elf_rewrite_in_place(path, &v2));
	ASSERT_EQ(0, access(upperlib, F_OK)) TH_LOG("%s not copied up", path);
	wd_up = inotify_add_watch(fd, upperlib, IN_ACCESS);
	ASSERT_GE(wd_up, 0);
	count_access(fd, wd_ovl, &n_ovl, wd_up, &n_other);
	m = map_and_record(&self->ev, &self->recs, path, 0);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	count_access(fd, wd_ovl, &n_ovl, wd_up, &n_other);
	ASSERT_EQ(0, n_ovl) TH_LOG("mapping %s read it: IN_ACCESS on the overlay file", path);
	ASSERT_EQ(0, n_other) TH_LOG("mapping %s read the upper file: IN_ACCESS", path);
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
	elf_spec_build_id(&v2, id, &id_len);
	ASSERT_EQ(id_len, m->build_id_size);
	ASSERT_EQ(0, memcmp(id, m->build_id, id_len));
	expect_build_id(_metadata, m, &v2, path);
	ASSERT_EQ(1, file_build_id(upperlib, id, &id_len));
	count_access(fd, wd_ovl, &n_ovl, wd_up, &n_other);
	ASSERT_LT(0, n_ovl) TH_LOG("inotify saw no read() of %s: the test proves nothing", path);
	ASSERT_LT(0, n_other)
		TH_LOG("inotify saw no read() of %s: the test proves nothing", upperlib);
	close(fd);
}

/* GETATTR requests from task @pid the FUSE daemon reported, until now */
static int fuse_getattrs(struct fuse_backing *fb, pid_t pid)
{
	char line[128];
	int n = 0, who;

	/* The daemon reports a request before it answers it: all are there */
	while (fuse_backing_report(fb, line, sizeof(line), 0) == 1)
		if (sscanf(line, "getattr %d", &who) == 1 && who == pid)
			n++;
	return n;
}

/*
 * Map the open overlay file @fd executable; the record, and the number of
 * GETATTR requests the test process sent the FUSE daemon meanwhile.
 */
static const struct perf_mmap3_record *
map_overlay_on_fuse(struct __test_metadata *_metadata, FIXTURE_DATA(mmap3) *self,
		    int fd, const char *path, int *getattrs)
{
	void *p = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);

	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap %s: %s", path, strerror(errno));
	*getattrs = fuse_getattrs(&self->fuse, getpid());
	mmap3_collect(&self->ev, &self->recs);
	munmap(p, 4096);
	return record_for(&self->recs, path, p);
}

/*
 * The same where inotify is missing (as in the project's test kernel), with
 * the FUSE daemon as the witness: the lower layer is a FUSE mount.  A read()
 * of a FUSE file, through the overlay or not, first revalidates the file's
 * attributes (auto_inval_data; they expire at once here): a GETATTR request.
 * Reading its page cache does not.  So mmap() of the overlay file must not
 * send a GETATTR.
 *
 * First with the lower file's pages not cached (FUSE's open() dropped them):
 * the right build ID or none.  Then a pread() of the same open file, which
 * must send a GETATTR (the witness sees a read) and caches the pages, and a
 * second mapping of it: now the build ID is there to be found.
 */
TEST_F_TIMEOUT(mmap3, overlay_on_fuse_capture_does_not_read_the_file, 300)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x3e };
	char backing[PATH_MAX], mnt[PATH_MAX], upper[PATH_MAX + 8];
	char work[PATH_MAX + 8], merged[PATH_MAX + 8], opts[4 * PATH_MAX + 64];
	char lib[PATH_MAX + 16], path[PATH_MAX + 16], buf[64], h1[41], h2[41];
	const struct perf_mmap3_record *m;
	unsigned char id[20];
	unsigned int id_len;
	int fd, getattrs;

	REQUIRE_MMAP3();
	if (!start_fuse(_metadata, self, NULL, FUSE_BACKING_LOG, backing, mnt))
		return;
	snprintf(lib, sizeof(lib), "%s/lib.so", backing);
	ASSERT_EQ(0, elf_write(lib, &v1, false));
	elf_spec_build_id(&v1, id, &id_len);
	snprintf(upper, sizeof(upper), "%s/upper", self->dir);
	snprintf(work, sizeof(work), "%s/work", self->dir);
	snprintf(merged, sizeof(merged), "%s/merged", self->dir);
	ASSERT_EQ(0, mkdir(upper, 0755));
	ASSERT_EQ(0, mkdir(work, 0755));
	ASSERT_EQ(0, mkdir(merged, 0755));
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s",
		 mnt, upper, work);
	if (mount("overlay", merged, "overlay", 0, opts)) {
		if (errno == ENODEV || errno == EPERM)
			SKIP(return, "no overlayfs here: %s", strerror(errno));
		ASSERT_EQ(0, errno) TH_LOG("mount overlay on a FUSE lower: %s", strerror(errno));
	}
	note_mount(self, merged);
	snprintf(path, sizeof(path), "%s/lib.so", merged);

	fd = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_GE(fd, 0) TH_LOG("%s: %s", path, strerror(errno));
	fuse_getattrs(&self->fuse, getpid());	/* the open's */

	/* Not cached */
	m = map_overlay_on_fuse(_metadata, self, fd, path, &getattrs);
	ASSERT_EQ(0, getattrs)
		TH_LOG("mmap() of %s revalidated the attributes of the FUSE file under it, as read() does: the build ID was read with read()",
		       path);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	if (m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND) {
		ASSERT_EQ(id_len, m->build_id_size);
		ASSERT_EQ(0, memcmp(id, m->build_id, id_len))
			TH_LOG("record %s, file %s",
			       hex(m->build_id, m->build_id_size, h1), hex(id, id_len, h2));
	} else {
		TH_LOG("pages not cached: status %u", m->build_id_status);
	}

	/* The witness sees a read(), which caches the pages ... */
	ASSERT_EQ(sizeof(buf), pread(fd, buf, sizeof(buf), 0));
	ASSERT_LT(0, fuse_getattrs(&self->fuse, getpid()))
		TH_LOG("read() of %s sent the FUSE daemon no GETATTR: the test proves nothing",
		       path);

	/* ... and the same open file maps with its build ID */
	m = map_overlay_on_fuse(_metadata, self, fd, path, &getattrs);
	ASSERT_EQ(0, getattrs)
		TH_LOG("mmap() of %s revalidated the attributes of the FUSE file under it, as read() does: the build ID was read with read()",
		       path);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status)
		TH_LOG("pages cached, yet no build ID");
	ASSERT_EQ(id_len, m->build_id_size);
	ASSERT_EQ(0, memcmp(id, m->build_id, id_len))
		TH_LOG("record %s, file %s", hex(m->build_id, m->build_id_size, h1),
		       hex(id, id_len, h2));
	close(fd);
}

/* Is @name in /proc/filesystems (built in, or its module loaded)? */
static bool has_filesystem(const char *name)
{
	FILE *f = fopen("/proc/filesystems", "r");
	char line[128], *fs;
	bool found = false;

	if (!f)
		return false;
	while (!found && fgets(line, sizeof(line), f)) {
		fs = strchr(line, '\t');
		fs = fs ? fs + 1 : line;
		fs[strcspn(fs, "\n")] = '\0';
		found = !strcmp(fs, name);
	}
	fclose(f);
	return found;
}

/*
 * A Coda mount served by selftests/coda_venus, in the test's directory:
 * CACHE holds the container files the cache manager hands the kernel, MNT
 * is the Coda view of them.  Returns false if the test was skipped.
 */
static bool start_coda(struct __test_metadata *_metadata,
		       FIXTURE_DATA(mmap3) *self, char cache[PATH_MAX],
		       char mnt[PATH_MAX])
{
	char daemon[PATH_MAX];
	const char *problem;

	if (!has_filesystem("coda"))
		SKIP(return false, "no Coda in this kernel (CONFIG_CODA_FS)");
	snprintf(daemon, sizeof(daemon), "%s/coda_venus", exe_dir());
	if (access(daemon, X_OK))
		SKIP(return false, "no %.900s: %s", daemon, strerror(errno));
	snprintf(cache, PATH_MAX, "%s/cache", self->dir);
	snprintf(mnt, PATH_MAX, "%s/coda", self->dir);
	ASSERT_EQ(0, mkdir(cache, 0755) || mkdir(mnt, 0755))
		TH_LOG("mkdir: %s", strerror(errno));
	problem = coda_venus_start(&self->venus, daemon, cache, mnt, 60 * 1000);
	ASSERT_EQ(NULL, problem) TH_LOG("%s", problem);
	return true;
}

/* Upcalls of one task that coda_venus reported */
struct coda_upcalls {
	int open, close, read, mmap;
	unsigned long long container;	/* inode the last open was handed */
};

/* The upcalls task @pid sent coda_venus since the last call */
static void coda_upcalls(struct fuse_backing *venus, pid_t pid,
			 struct coda_upcalls *c)
{
	char line[256], what[16];
	unsigned long long ino;
	int who;

	memset(c, 0, sizeof(*c));
	/* Reported before they are answered: all are there already */
	while (fuse_backing_report(venus, line, sizeof(line), 0) == 1) {
		if (sscanf(line, "open %d %*s %llu", &who, &ino) == 2 && who == pid) {
			c->open++;
			c->container = ino;
		} else if (sscanf(line, "close %d", &who) == 1 && who == pid) {
			c->close++;
		} else if (sscanf(line, "intent %d %*s %15s", &who, what) == 2 &&
			   who == pid) {
			c->read += !strcmp(what, "read");
			c->mmap += !strcmp(what, "mmap");
		}
	}
}

/* The file /proc/self/maps names for the mapping at @addr, or NULL */
static const char *maps_path(void *addr, char *buf, size_t size)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[PATH_MAX + 128];
	unsigned long start;
	const char *found = NULL;
	int off;

	if (!f)
		return NULL;
	while (!found && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%lx-%*x %*s %*x %*x:%*x %*u %n", &start, &off) != 1 ||
		    start != (unsigned long)addr)
			continue;
		line[strcspn(line, "\n")] = '\0';
		snprintf(buf, size, "%s", line + off);
		found = buf;
	}
	fclose(f);
	return found;
}

/*
 * Map the first page of the open file @fd executable; the MMAP3 record of
 * the mapping, whatever file it names, with that file's name as
 * /proc/self/maps shows it in @maps.  NULL (and errno) if mmap() failed.
 */
static const struct perf_mmap3_record *
map_fd(FIXTURE_DATA(mmap3) *self, int fd, char maps[PATH_MAX], void **addr)
{
	*addr = mmap(NULL, 4096, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	if (*addr == MAP_FAILED)
		return NULL;
	if (!maps_path(*addr, maps, PATH_MAX))
		maps[0] = '\0';
	mmap3_collect(&self->ev, &self->recs);
	return record_for(&self->recs, NULL, *addr);
}

/*
 * Open @path afresh, map it as map_fd() does, unmap it and close it; the
 * record, and the upcalls all that sent the cache manager in @c.
 */
static const struct perf_mmap3_record *
map_coda_file(FIXTURE_DATA(mmap3) *self, const char *path, char maps[PATH_MAX],
	      struct coda_upcalls *c)
{
	const struct perf_mmap3_record *m = NULL;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	void *p;

	if (fd >= 0) {
		m = map_fd(self, fd, maps, &p);
		if (m)
			munmap(p, 4096);
		close(fd);
	}
	coda_upcalls(&self->venus, getpid(), c);
	return m;
}

/*
 * @m is the record of a mapping of @container, the file coda_file_mmap()
 * put in the VMA, and says so as /proc/self/maps (@maps) does: its name,
 * device and inode, not the Coda file's.
 */
static void expect_container(struct __test_metadata *_metadata,
			     const struct perf_mmap3_record *m,
			     const char *maps, const char *container)
{
	char real[PATH_MAX];
	struct stat st;

	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for the mapping of %s", container);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_NE(NULL, realpath(container, real))
		TH_LOG("%s: %s", container, strerror(errno));
	ASSERT_EQ(0, stat(real, &st));
	ASSERT_STREQ(real, maps);
	ASSERT_STREQ(real, m->filename);
	ASSERT_EQ(major(st.st_dev), m->maj);
	ASSERT_EQ(minor(st.st_dev), m->min);
	ASSERT_EQ(st.st_ino, m->ino);
}

/* @m says FOUND with the build ID @id of @len bytes, the container's */
static void expect_id(struct __test_metadata *_metadata,
		      const struct perf_mmap3_record *m,
		      const unsigned char *id, unsigned int len)
{
	char seen[41], want[41];

	ASSERT_TRUE(m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND &&
		    m->build_id_size == len && !memcmp(m->build_id, id, len))
		TH_LOG("status %u, build ID %s; the container has %s", m->build_id_status,
		       hex(m->build_id, m->build_id_size, seen), hex(id, len, want));
}

/*
 * The fixture @name, a container for the Coda test: its real path in
 * @real, its build ID in @id.  It is read in full first, so its pages are
 * cached.  False if the test was skipped.
 */
static bool coda_container(struct __test_metadata *_metadata, const char *name,
			   char real[PATH_MAX], unsigned char *id, unsigned int *len)
{
	char path[PATH_MAX];
	struct statfs sfs;
	struct stat st;

	snprintf(path, sizeof(path), "%s/fixtures/%s", exe_dir(), name);
	ASSERT_NE(NULL, realpath(path, real)) TH_LOG("%s missing", path);
	ASSERT_EQ(0, statfs(real, &sfs));
	if (sfs.f_type == TMPFS_MAGIC)
		SKIP(return false,
		     "%.900s is on tmpfs: a shmem container makes do_mmap() read memfd seals outside the Coda inode",
		     real);
	ASSERT_EQ(1, build_id_by_read(real, id, len)) TH_LOG("%s: no build ID", real);
	ASSERT_EQ(0, stat(real, &st));
	ASSERT_EQ((st.st_size + 4095) / 4096, cached_pages(real, false))
		TH_LOG("%s not all cached after reading it", real);
	return true;
}

/* Point the cache manager's @link at @target, as a rename over it */
static int relink(const char *target, const char *link)
{
	char tmp[PATH_MAX + 16];

	snprintf(tmp, sizeof(tmp), "%s.new", link);
	unlink(tmp);
	if (symlink(target, tmp) || rename(tmp, link))
		return -errno;
	return 0;
}

/*
 * Coda's ->mmap() puts the container file venus handed over at open time
 * in the VMA, and points the Coda inode's i_mapping at the container's: the
 * build ID read before mmap_lock was taken (for the Coda file, whose own
 * page cache is empty) is not the mapped file's.  The record must then
 * give the page-cache-only parse of the container (FOUND with its build ID
 * while its pages are cached, UNAVAILABLE when they are not), never the
 * build ID of another file or version, and mapping must read nothing:
 * no CODA_ACCESS_INTENT read upcall (a read() through Coda sends one), no
 * page of the container brought into the page cache.
 *
 * Containers: fixtures built on the host, on 9p in the guest, which the
 * cache directory (tmpfs) links to: lib.so is coda-v1.elf, then coda-v2.elf
 * as venus replaces a file after fetching a new version; cold.so is
 * cold.elf, whose pages can be dropped.  Not tmpfs files: once a Coda file
 * is mapped its f_mapping is the container's, and for a shmem one every
 * later mmap() of the Coda file has do_mmap()'s memfd_file_seals() take it
 * for a shmem file and read "seals" through SHMEM_I() of the Coda inode,
 * outside that inode's object (an upstream bug; KASAN reports it).
 */
TEST_F_TIMEOUT(mmap3, coda_mapping_parses_only_the_container_page_cache, 300)
{
	char cache[PATH_MAX], mnt[PATH_MAX], maps[PATH_MAX], cold[PATH_MAX];
	char v1[PATH_MAX], v2[PATH_MAX];
	char lib[PATH_MAX + 16], path[PATH_MAX + 16], cold_link[PATH_MAX + 16];
	char h1[41], buf[64];
	unsigned char id1[20], id2[20], cold_id[20];
	unsigned int len1, len2, cold_len;
	const struct perf_mmap3_record *m;
	struct coda_upcalls c;
	struct stat st, coda_st;
	size_t nr_recs;
	int fd_a, fd_b, n;
	void *a, *b;

	REQUIRE_MMAP3();
	if (!start_coda(_metadata, self, cache, mnt))
		return;
	if (!coda_container(_metadata, "coda-v1.elf", v1, id1, &len1) ||
	    !coda_container(_metadata, "coda-v2.elf", v2, id2, &len2))
		return;
	ASSERT_FALSE(len1 == len2 && !memcmp(id1, id2, len1))
		TH_LOG("%s and %s have the same build ID", v1, v2);
	snprintf(lib, sizeof(lib), "%s/lib.so", cache);
	snprintf(path, sizeof(path), "%s/lib.so", mnt);
	ASSERT_EQ(0, relink(v1, lib));

	/* (a) The container's pages cached: its build ID, its name */
	m = map_coda_file(self, path, maps, &c);
	ASSERT_NE(NULL, m) TH_LOG("mapping %s: %s", path, strerror(errno));
	expect_container(_metadata, m, maps, lib);
	ASSERT_EQ(0, stat(path, &coda_st));
	ASSERT_NE(coda_st.st_ino, m->ino);
	expect_id(_metadata, m, id1, len1);
	/* (d) One open, one mmap intent, no read */
	ASSERT_EQ(1, c.open);
	ASSERT_EQ(1, c.close);
	ASSERT_EQ(1, c.mmap);
	ASSERT_EQ(0, c.read) TH_LOG("mapping %s read it: %d read intents", path, c.read);

	/* The witness: a read() through Coda is a read intent */
	fd_a = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd_a);
	ASSERT_EQ(sizeof(buf), pread(fd_a, buf, sizeof(buf), 0));
	close(fd_a);
	coda_upcalls(&self->venus, getpid(), &c);
	ASSERT_LT(0, c.read)
		TH_LOG("read() of %s sent no read intent: the test proves nothing", path);

	/*
	 * (c) Version 2 replaces the container while version 1 is mapped.
	 * Coda refuses to map a file whose open has another container than
	 * the mapping that is there (EBUSY); once that is gone, the mapping
	 * has version 2, whose build ID the record must carry, never
	 * version 1's.  The open of version 2 was made while version 1 was
	 * mapped: its f_mapping is version 1's, which stays cached.
	 */
	fd_a = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd_a);
	m = map_fd(self, fd_a, maps, &a);
	ASSERT_NE(NULL, m) TH_LOG("mapping %s: %s", path, strerror(errno));
	expect_id(_metadata, m, id1, len1);
	coda_upcalls(&self->venus, getpid(), &c);
	ASSERT_EQ(1, c.mmap);
	ASSERT_EQ(0, c.read);
	ASSERT_EQ(0, relink(v2, lib));
	ASSERT_EQ(0, stat(lib, &st));
	fd_b = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd_b);
	coda_upcalls(&self->venus, getpid(), &c);
	ASSERT_EQ(1, c.open);
	ASSERT_EQ(st.st_ino, c.container) TH_LOG("the open was not handed version 2");

	nr_recs = self->recs.n;
	ASSERT_EQ(NULL, map_fd(self, fd_b, maps, &b));
	ASSERT_EQ(EBUSY, errno);
	mmap3_collect(&self->ev, &self->recs);
	ASSERT_EQ(nr_recs, self->recs.n) TH_LOG("a mapping that failed has a record");

	munmap(a, 4096);
	close(fd_a);
	m = map_fd(self, fd_b, maps, &b);
	ASSERT_NE(NULL, m) TH_LOG("mapping %s: %s", path, strerror(errno));
	munmap(b, 4096);
	close(fd_b);
	ASSERT_FALSE(m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND &&
		     m->build_id_size == len1 && !memcmp(m->build_id, id1, len1))
		TH_LOG("the mapping of version 2 has version 1's build ID %s",
		       hex(id1, len1, h1));
	expect_container(_metadata, m, maps, lib);
	expect_id(_metadata, m, id2, len2);
	coda_upcalls(&self->venus, getpid(), &c);
	ASSERT_EQ(2, c.mmap);
	ASSERT_EQ(0, c.read) TH_LOG("mapping %s read it: %d read intents", path, c.read);

	/* A fresh open has version 2 too */
	m = map_coda_file(self, path, maps, &c);
	expect_container(_metadata, m, maps, lib);
	expect_id(_metadata, m, id2, len2);
	ASSERT_EQ(0, c.read);

	/* (a) again, with cold.elf, read in full first */
	if (!coda_container(_metadata, "cold.elf", cold, cold_id, &cold_len))
		return;
	snprintf(cold_link, sizeof(cold_link), "%s/cold.so", cache);
	ASSERT_EQ(0, symlink(cold, cold_link));
	snprintf(path, sizeof(path), "%s/cold.so", mnt);
	m = map_coda_file(self, path, maps, &c);
	expect_container(_metadata, m, maps, cold);
	expect_id(_metadata, m, cold_id, cold_len);
	ASSERT_EQ(1, c.mmap);
	ASSERT_EQ(0, c.read);

	/* (b) Its pages dropped: no build ID, or the right one */
	n = cached_pages(cold, true);
	ASSERT_LE(0, n) TH_LOG("%s: cannot tell which of its pages are cached", cold);
	if (n)
		SKIP(return, "%d pages of %.900s stay cached (the rest passed)", n, cold);
	m = map_coda_file(self, path, maps, &c);
	n = cached_pages(cold, false);
	expect_container(_metadata, m, maps, cold);
	if (m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND) {
		expect_id(_metadata, m, cold_id, cold_len);
		TH_LOG("pages dropped: FOUND, the container's build ID");
	} else {
		ASSERT_EQ(PERF_MMAP3_BUILD_ID_UNAVAILABLE, m->build_id_status);
		TH_LOG("pages dropped: UNAVAILABLE");
	}
	/* (d) Nothing read the container for it */
	ASSERT_EQ(0, n) TH_LOG("mapping %s brought %d pages of %s in", path, n, cold);
	ASSERT_EQ(1, c.mmap);
	ASSERT_EQ(0, c.read) TH_LOG("mapping %s read it: %d read intents", path, c.read);
}

/* The first @size bytes of @path into @buf; 0 or -1 */
static int read_file_start(const char *path, void *buf, size_t size)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = -1;

	if (fd >= 0) {
		n = pread(fd, buf, size, 0);
		close(fd);
	}
	return n == (ssize_t)size ? 0 : -1;
}

/*
 * hugetlbfs indexes its page cache in huge pages, not in PAGE_SIZE pages: a
 * reader that looks up page index 1 there finds the second huge page.  So
 * an ELF file on hugetlbfs whose note is in its second 4 KiB page, with a
 * decoy note (another build ID) at the same place in the second huge page,
 * mapped executable: its record must say the build ID is unavailable, and
 * never carry the decoy's.
 */
TEST_F_TIMEOUT(mmap3, hugetlbfs_file_is_unavailable, 120)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x48,
				 .note_off = 4096 + 64, .size = 2 * 4096 };
	struct elf_spec decoy = spec;
	char dir[PATH_MAX], path[PATH_MAX + 16], tmp[PATH_MAX + 16], h[41];
	static char real_img[2 * 4096], decoy_img[2 * 4096];
	const struct perf_mmap3_record *m;
	size_t huge, len;
	struct statfs sfs;
	char *p, *x;
	int fd;

	REQUIRE_MMAP3();
	decoy.id_seed = 0x49;
	snprintf(tmp, sizeof(tmp), "%s/img", self->dir);
	ASSERT_EQ(0, elf_write(tmp, &decoy, false));
	ASSERT_EQ(0, read_file_start(tmp, decoy_img, sizeof(decoy_img)));
	ASSERT_EQ(0, elf_write(tmp, &spec, true));
	ASSERT_EQ(0, read_file_start(tmp, real_img, sizeof(real_img)));

	snprintf(dir, sizeof(dir), "%s/huge", self->dir);
	ASSERT_EQ(0, mkdir(dir, 0755));
	if (mount("none", dir, "hugetlbfs", 0, NULL)) {
		if (errno == ENODEV)
			SKIP(return, "no hugetlbfs in this kernel");
		ASSERT_EQ(0, errno) TH_LOG("mount hugetlbfs: %s", strerror(errno));
	}
	note_mount(self, dir);
	ASSERT_EQ(0, statfs(dir, &sfs));
	huge = sfs.f_bsize;
	len = 2 * huge;
	if (read_int_file("/proc/sys/vm/nr_hugepages") < 2)
		ASSERT_EQ(0, set_sysctl("/proc/sys/vm/nr_hugepages", 2));

	snprintf(path, sizeof(path), "%s/lib.so", dir);
	fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0755);
	ASSERT_GE(fd, 0) TH_LOG("%s: %s", path, strerror(errno));
	ASSERT_EQ(0, ftruncate(fd, len));
	/* Shared mappings reserve their huge pages now: no SIGBUS later */
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED && errno == ENOMEM) {
		close(fd);
		SKIP(return, "two huge pages of %zu KiB could not be reserved", huge >> 10);
	}
	ASSERT_NE(MAP_FAILED, p) TH_LOG("mmap %s: %s", path, strerror(errno));
	memcpy(p, real_img, sizeof(real_img));
	memcpy(p + huge + 4096, decoy_img + 4096, 4096);
	munmap(p, len);

	x = mmap(NULL, len, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	close(fd);
	ASSERT_NE(MAP_FAILED, x) TH_LOG("mmap %s executable: %s", path, strerror(errno));
	mmap3_collect(&self->ev, &self->recs);
	munmap(x, len);
	m = record_for(&self->recs, path, x);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_UNAVAILABLE, m->build_id_status)
		TH_LOG("status %u, build ID %s (the decoy's starts %02x, the file's %02x)",
		       m->build_id_status, hex(m->build_id, m->build_id_size, h),
		       decoy.id_seed, spec.id_seed);
}

/* The crafted corpus mkfixture writes, and what the kernel must say of it */
struct corpus_entry {
	char name[64];
	unsigned int status;
	unsigned char id[20];
	unsigned int id_len;
};

#define CORPUS_MAX	128

static int read_corpus(const char *dir, struct corpus_entry *e, int max)
{
	char path[PATH_MAX], line[256], hexid[64];
	int n = 0, fields;
	unsigned int i;
	FILE *f;

	snprintf(path, sizeof(path), "%s/MANIFEST", dir);
	f = fopen(path, "r");
	if (!f)
		return -errno;
	while (n < max && fgets(line, sizeof(line), f)) {
		hexid[0] = '\0';
		fields = sscanf(line, "%63s %u %63s", e[n].name, &e[n].status,
				hexid);
		if (fields < 2)
			continue;
		e[n].id_len = strlen(hexid) / 2;
		if (e[n].id_len > 20) {
			n = -EINVAL;
			break;
		}
		for (i = 0; i < e[n].id_len; i++)
			sscanf(hexid + 2 * i, "%2hhx", &e[n].id[i]);
		n++;
	}
	fclose(f);
	return n;
}

static void expect_corpus_status(struct __test_metadata *_metadata,
				 FIXTURE_DATA(mmap3) *self, const char *path,
				 const struct corpus_entry *e)
{
	const struct perf_mmap3_record *m =
		map_and_record(&self->ev, &self->recs, path, 0);
	unsigned char file[20];
	unsigned int file_len = 0;
	char h1[41], h2[41];

	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(e->status, m->build_id_status) TH_LOG("%s", path);
	if (e->status == PERF_MMAP3_BUILD_ID_FOUND) {
		ASSERT_EQ(e->id_len, m->build_id_size) TH_LOG("%s", path);
		ASSERT_EQ(0, memcmp(e->id, m->build_id, e->id_len))
			TH_LOG("%s: record %s, want %s", path,
			       hex(m->build_id, m->build_id_size, h1),
			       hex(e->id, e->id_len, h2));
		/* libelf, independently, reads the same from the file */
		ASSERT_EQ(1, file_build_id(path, file, &file_len)) TH_LOG("%s", path);
		ASSERT_EQ(e->id_len, file_len);
		ASSERT_EQ(0, memcmp(e->id, file, file_len)) TH_LOG("%s", path);
	} else {
		ASSERT_EQ(0, m->build_id_size) TH_LOG("%s", path);
	}
	rec_list_free(&self->recs);
}

static int copy_file(const char *from, const char *to)
{
	char buf[65536];
	int in, out, err = 0;
	ssize_t n;

	in = open(from, O_RDONLY | O_CLOEXEC);
	if (in < 0)
		return -errno;
	out = open(to, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (out < 0) {
		err = -errno;
		close(in);
		return err;
	}
	while ((n = read(in, buf, sizeof(buf))) > 0)
		if (write(out, buf, n) != n) {
			err = -EIO;
			break;
		}
	if (n < 0)
		err = -errno;
	close(in);
	if (close(out) && !err)
		err = -errno;
	return err;
}

/*
 * Every file of the crafted corpus (every build-ID size from 1 to 20 and
 * oversize ones, ELF32 and ELF64, notes past page 0, program headers at the
 * end and across a page, build IDs after other notes, 8-byte aligned notes,
 * a second PT_NOTE, every malformation, not ELF at all) gets its status
 * mapped from 9p (the build directory), from tmpfs and through overlayfs.
 */
TEST_F(mmap3, crafted_corpus_on_9p_tmpfs_and_overlay)
{
	static struct corpus_entry e[CORPUS_MAX];
	char corpus[PATH_MAX], lower[PATH_MAX], upper[PATH_MAX], work[PATH_MAX];
	char merged[PATH_MAX], opts[4 * PATH_MAX], path[2 * PATH_MAX];
	int n, i;

	REQUIRE_MMAP3();
	snprintf(corpus, sizeof(corpus), "%s/fixtures/corpus", exe_dir());
	n = read_corpus(corpus, e, CORPUS_MAX);
	ASSERT_LE(50, n) TH_LOG("%s/MANIFEST: %d entries (run mkfixture)",
				corpus, n);

	snprintf(lower, sizeof(lower), "%s/lower", self->dir);
	ASSERT_EQ(0, mkdir(lower, 0755));
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", corpus, e[i].name);
		expect_corpus_status(_metadata, self, path, &e[i]);
	}
	for (i = 0; i < n; i++) {
		char from[2 * PATH_MAX];

		snprintf(from, sizeof(from), "%s/%s", corpus, e[i].name);
		snprintf(path, sizeof(path), "%s/%s", lower, e[i].name);
		ASSERT_EQ(0, copy_file(from, path)) TH_LOG("%s", path);
		expect_corpus_status(_metadata, self, path, &e[i]);
	}

	snprintf(upper, sizeof(upper), "%s/upper", self->dir);
	snprintf(work, sizeof(work), "%s/work", self->dir);
	snprintf(merged, sizeof(merged), "%s/merged", self->dir);
	ASSERT_EQ(0, mkdir(upper, 0755));
	ASSERT_EQ(0, mkdir(work, 0755));
	ASSERT_EQ(0, mkdir(merged, 0755));
	snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s",
		 lower, upper, work);
	if (mount("overlay", merged, "overlay", 0, opts)) {
		if (errno == ENODEV || errno == EPERM)
			SKIP(return, "no overlayfs here: %s", strerror(errno));
		ASSERT_EQ(0, errno);
	}
	for (i = 0; i < n; i++) {
		snprintf(path, sizeof(path), "%s/%s", merged, e[i].name);
		expect_corpus_status(_metadata, self, path, &e[i]);
	}
	ASSERT_EQ(0, umount(merged));
}

/* Runs where MMAP3 is absent (stock kernels, the host): the bit is refused */
TEST(mmap3_bit_rejected_without_support)
{
	if (mmap3_supported())
		SKIP(return, "kernel has MMAP3");
	ASSERT_EQ(-EINVAL, mmap3_open_fd(0, -1, EV_MMAP3));
	ASSERT_EQ(-EINVAL, mmap3_open_fd(0, -1, EV_MMAP3 | EV_MMAP2));
}

/*
 * An unprivileged task gets MMAP3 exactly where it would get MMAP2: the
 * same errno for each perf_event_paranoid level and target, and its own
 * mappings with their build IDs where allowed.
 */
static int unprivileged_child(const char *path, int paranoid)
{
	struct mmap3_event ev;
	struct rec_list recs = { 0 };
	const struct perf_mmap3_record *m;
	int task2, task3, cpu2, cpu3, ret = 0;

	if (setgid(65534) || setuid(65534))
		return 80;
	task2 = mmap3_open_fd(0, -1, EV_MMAP | EV_MMAP2);
	task3 = mmap3_open_fd(0, -1, EV_MMAP3);
	cpu2 = mmap3_open_fd(-1, 0, EV_MMAP | EV_MMAP2);
	cpu3 = mmap3_open_fd(-1, 0, EV_MMAP3);
	if ((task2 < 0 ? task2 : 0) != (task3 < 0 ? task3 : 0))
		ret = 81;
	if ((cpu2 < 0 ? cpu2 : 0) != (cpu3 < 0 ? cpu3 : 0))
		ret = 82;
	if (paranoid <= 2 && task3 < 0)
		ret = 83;	/* own task is always allowed up to 2 */
	if (paranoid >= 1 && cpu3 >= 0)
		ret = 84;	/* CPU-wide needs privilege from 1 on */
	if (ret || task3 < 0)
		return ret;
	if (mmap3_open(&ev, 0, -1, EV_MMAP3, 16))
		return 85;
	m = map_and_record(&ev, &recs, path, 0);
	if (!m || m->build_id_status != PERF_MMAP3_BUILD_ID_FOUND)
		return 86;
	return 0;
}

TEST_F(mmap3, unprivileged_profiling_matches_mmap2)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xc0 };
	char path[PATH_MAX];
	int level;

	REQUIRE_MMAP3();
	if (geteuid())
		SKIP(return, "needs root to switch users and set %s", PARANOID);
	ASSERT_EQ(0, chmod(self->dir, 0755));
	snprintf(path, sizeof(path), "%s/user", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));

	for (level = -1; level <= 2; level++) {
		int status;
		pid_t pid;

		ASSERT_EQ(0, set_sysctl(PARANOID, level));
		pid = fork();
		ASSERT_GE(pid, 0);
		if (!pid)
			_exit(unprivileged_child(path, level));
		ASSERT_EQ(pid, waitpid(pid, &status, 0));
		ASSERT_TRUE(WIFEXITED(status));
		EXPECT_EQ(0, WEXITSTATUS(status))
			TH_LOG("perf_event_paranoid=%d", level);
	}
}

/* State letter of a thread, from /proc/PID/task/TID/stat; '?' if gone */
static char thread_state(pid_t pid, pid_t tid)
{
	char name[32], buf[512], *c;

	snprintf(name, sizeof(name), "task/%d/stat", tid);
	c = strrchr(proc_line(pid, name, buf, sizeof(buf)), ')');
	return c && c[1] && c[2] ? c[2] : '?';
}

/* Resident pages of this process, from /proc/self/statm */
static long resident_pages(void)
{
	long size, resident = -1;
	FILE *f = fopen("/proc/self/statm", "r");

	if (!f)
		return -1;
	if (fscanf(f, "%ld %ld", &size, &resident) != 2)
		resident = -1;
	fclose(f);
	return resident;
}

#define RACE_POPULATE	(512UL << 20)
#define RACE_DESC_OFF	0x210	/* the build ID's bytes in an elf_spec file */

/* Flags in a page shared with a forked writer, which both sides poll */
struct race_shared {
	int populating, mapper_tid, writer_ready, mapping, wrote;
};

static int race_get(int *flag)
{
	return __atomic_load_n(flag, __ATOMIC_SEQ_CST);
}

static void race_set(int *flag, int v)
{
	__atomic_store_n(flag, v, __ATOMIC_SEQ_CST);
}

static struct race_shared *race;
static char *race_area;

/* Holds this process's mmap_lock for reading while it populates */
static void *race_populate(void *arg)
{
	race_set(&race->populating, 1);
	madvise(race_area, RACE_POPULATE, 23 /* MADV_POPULATE_WRITE */);
	race_set(&race->populating, 2);
	return NULL;
}

/*
 * The file changes between the read before mmap_lock and the record made
 * under it, through a shared writable mapping, which moves no timestamp and
 * no i_version: the record must describe what the new mapping maps.  A
 * thread holds mmap_lock (a long MADV_POPULATE_WRITE) while the test maps
 * the file, so the mapping reads the build ID and then waits for the lock;
 * another process sees the mapping thread asleep and rewrites the build ID
 * through its mapping.  The v4 series' first version said FOUND with the
 * old build ID here.
 */
TEST_F_TIMEOUT(mmap3, write_through_shared_mapping_before_the_record, 300)
{
	struct elf_spec v1 = { .id_len = 20, .id_seed = 0x10 };
	unsigned char id1[20], id2[20], seen[20];
	const struct perf_mmap3_record *m;
	char path[PATH_MAX], h1[41], h2[41];
	unsigned int len, i;
	pthread_t populator;
	pid_t writer, me = getpid();
	int fd, status;
	long base;
	char *map;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/shared-write.so", self->dir);
	ASSERT_EQ(0, elf_write(path, &v1, false));
	elf_spec_build_id(&v1, id1, &len);
	for (i = 0; i < 20; i++)
		id2[i] = 0xa0 + i;
	race = mmap(NULL, 4096, PROT_READ | PROT_WRITE,
		    MAP_SHARED | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, race);

	writer = fork();
	ASSERT_LE(0, writer);
	if (writer == 0) {
		int wfd = open(path, O_RDWR | O_CLOEXEC);
		char *wm = wfd < 0 ? MAP_FAILED :
			mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, wfd, 0);
		int tries, hit = 0;

		if (wm == MAP_FAILED)
			_exit(1);
		/* Dirty the page table entry now, with the same bytes */
		memcpy(wm + RACE_DESC_OFF, id1, 20);
		race_set(&race->writer_ready, 1);
		/* Until the mapping thread sleeps in mmap() (bounded) */
		for (tries = 0; tries < 6000000; tries++) {
			if (race_get(&race->mapping) && race_get(&race->populating) == 1 &&
			    thread_state(me, race_get(&race->mapper_tid)) == 'D') {
				hit = 1;
				break;
			}
			if (race_get(&race->populating) == 2)
				break;	/* the window closed */
			sched_yield();
		}
		memcpy(wm + RACE_DESC_OFF, id2, 20);
		race_set(&race->wrote, 1);
		_exit(hit ? 0 : 3);
	}
	for (i = 0; !race_get(&race->writer_ready) && i < 600000; i++)
		usleep(100);
	ASSERT_EQ(1, race_get(&race->writer_ready)) TH_LOG("the writer never got ready");

	race_area = mmap(NULL, RACE_POPULATE, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	ASSERT_NE(MAP_FAILED, race_area);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	ASSERT_LE(0, fd);
	race_set(&race->mapper_tid, syscall(SYS_gettid));
	base = resident_pages();
	ASSERT_EQ(0, pthread_create(&populator, NULL, race_populate, NULL));
	/* Populating, so holding mmap_lock: 16 MB of it are in (bounded) */
	for (i = 0; resident_pages() < base + 4096 && i < 3000000; i++)
		sched_yield();
	ASSERT_LE(base + 4096, resident_pages()) TH_LOG("the populate never started");
	race_set(&race->mapping, 1);
	map = mmap(NULL, 8192, PROT_READ | PROT_EXEC, MAP_PRIVATE, fd, 0);
	ASSERT_NE(MAP_FAILED, map);
	memcpy(seen, map + RACE_DESC_OFF, 20);	/* what the mapping maps */
	pthread_join(populator, NULL);
	ASSERT_EQ(writer, waitpid(writer, &status, 0));
	close(fd);
	munmap(race_area, RACE_POPULATE);

	mmap3_collect(&self->ev, &self->recs);
	m = record_for(&self->recs, path, map);
	munmap(map, 8192);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	TH_LOG("window %s; record %u %s; mapping maps %s",
	       WEXITSTATUS(status) == 0 ? "hit" : "missed",
	       m->build_id_status, hex(m->build_id, m->build_id_size, h1),
	       hex(seen, 20, h2));
	if (m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND) {
		ASSERT_EQ(20, m->build_id_size);
		ASSERT_EQ(0, memcmp(seen, m->build_id, 20))
			TH_LOG("FOUND with a build ID the mapping does not map");
	}
	/* Whether the window was hit decides what the test proved */
	ASSERT_TRUE(WIFEXITED(status));
	ASSERT_EQ(0, WEXITSTATUS(status))
		TH_LOG("the populate released mmap_lock before the writer saw the mapping asleep");
	munmap((void *)race, 4096);
}

/*
 * A private mapping written to (a text relocation, a debugger's breakpoint)
 * and then made executable maps private copies of the file's pages: the
 * record must not say it maps the file's build ID.
 */
TEST_F(mmap3, mprotect_of_privately_written_mapping_is_not_the_file)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xc0 };
	const struct perf_mmap3_record *m;
	char path[PATH_MAX];
	char *p;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/cow.so", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	p = map_file(path, PROT_READ | PROT_WRITE, 0, 4096);
	ASSERT_NE(MAP_FAILED, p);
	p[0x210] ^= 0xff;	/* the first byte of the build ID, privately */
	mmap3_collect(&self->ev, &self->recs);
	rec_list_free(&self->recs);
	ASSERT_EQ(0, mprotect(p, 4096, PROT_READ | PROT_EXEC));
	mmap3_collect(&self->ev, &self->recs);
	m = record_for(&self->recs, path, p);
	munmap(p, 4096);
	ASSERT_NE(NULL, m) TH_LOG("no MMAP3 record for the mprotect() of %s", path);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_NE(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status)
		TH_LOG("FOUND for a mapping of private copies");
}

/*
 * Nothing is kept between mappings: 2000 files mapped in turn each get
 * their own build ID, and a file mapped again after it was rewritten gets
 * its new one (the old series' store could serve a stale entry there).
 * The harness's default 30 s is too short for this on a busy TCG guest.
 */
TEST_F_TIMEOUT(mmap3, thousands_of_files_each_get_their_own_build_id, 900)
{
	const int files = 2000;
	int i;

	REQUIRE_MMAP3();
	for (i = 0; i < files; i++) {
		struct elf_spec spec = { .id_len = 20, .id_seed = i, .size = 1024 };
		const struct perf_mmap3_record *m;
		char path[PATH_MAX];

		snprintf(path, sizeof(path), "%s/f%d", self->dir, i);
		ASSERT_EQ(0, elf_write(path, &spec, false));
		m = map_and_record(&self->ev, &self->recs, path, 0);
		expect_build_id(_metadata, m, &spec, path);
		if (i % 500 == 499)
			rec_list_free(&self->recs);
	}
}

/*
 * mprotect() reads the build IDs of at most four files before it takes
 * mmap_lock; the record of a fifth reads its page cache only.  Five files
 * on tmpfs (always cached) made executable by one call: each record carries
 * its own file's build ID, never another's.
 */
TEST_F(mmap3, mprotect_over_five_files_never_mixes_them_up)
{
	const int files = 5;
	struct elf_spec spec[5];
	char path[5][PATH_MAX];
	int i, found = 0;
	char *base;

	REQUIRE_MMAP3();
	base = mmap(NULL, files * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	ASSERT_NE(MAP_FAILED, base);
	for (i = 0; i < files; i++) {
		int fd;

		spec[i] = (struct elf_spec){ .id_len = 20, .id_seed = 0x70 + i };
		snprintf(path[i], sizeof(path[i]), "%s/mp%d", self->dir, i);
		ASSERT_EQ(0, elf_write(path[i], &spec[i], false));
		fd = open(path[i], O_RDONLY | O_CLOEXEC);
		ASSERT_LE(0, fd);
		ASSERT_EQ(base + i * 4096,
			  mmap(base + i * 4096, 4096, PROT_READ,
			       MAP_PRIVATE | MAP_FIXED, fd, 0));
		close(fd);
	}
	mmap3_collect(&self->ev, &self->recs);
	rec_list_free(&self->recs);
	ASSERT_EQ(0, mprotect(base, files * 4096, PROT_READ | PROT_EXEC));
	mmap3_collect(&self->ev, &self->recs);
	munmap(base, files * 4096);

	for (i = 0; i < files; i++) {
		const struct perf_mmap3_record *m =
			record_for(&self->recs, path[i], base + i * 4096);

		ASSERT_NE(NULL, m) TH_LOG("no record for %s", path[i]);
		if (m->build_id_status == PERF_MMAP3_BUILD_ID_UNAVAILABLE)
			continue;
		expect_build_id(_metadata, m, &spec[i], path[i]);
		found++;
	}
	/* Four read before the lock, the fifth from the page cache */
	ASSERT_EQ(5, found);
}

/*
 * Map two pages of @path shared and executable, then remap_file_pages() its
 * page 1 over the first; the record of that, or NULL with errno.  The file is
 * opened for writing: only then is a shared mapping VM_SHARED, which
 * remap_file_pages() needs.
 */
static const struct perf_mmap3_record *
map_then_remap(struct mmap3_event *ev, struct rec_list *recs, const char *path)
{
	const struct perf_mmap3_record *m = NULL;
	int fd = open(path, O_RDWR | O_CLOEXEC);
	void *p;

	if (fd < 0)
		return NULL;
	p = mmap(NULL, 2 * 4096, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED)
		return NULL;
	mmap3_collect(ev, recs);
	rec_list_free(recs);
	if (!remap_file_pages(p, 4096, 0, 1, 0)) {
		mmap3_collect(ev, recs);
		m = record_for(recs, path, p);
	}
	munmap(p, 2 * 4096);
	return m;
}

/*
 * Mappings that no read before mmap_lock was made for get what the page
 * cache holds, and nothing is read for them under the lock.  A page of a
 * tmpfs file remapped with remap_file_pages() (which maps under mmap_lock)
 * gets its build ID.  An mprotect() adding PROT_EXEC to five files reads
 * four before the lock; the fifth, a file shared over 9p whose pages were
 * dropped, gets UNAVAILABLE and stays out of the page cache.
 */
TEST_F_TIMEOUT(mmap3, mapping_made_under_mmap_lock_reads_only_the_page_cache, 300)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0x7a, .size = 2 * 4096 };
	const int files = 5;
	const struct perf_mmap3_record *m;
	char path[PATH_MAX], cold[PATH_MAX], h[41];
	char *base;
	int i, n;

	REQUIRE_MMAP3();
	snprintf(path, sizeof(path), "%s/remapped", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	m = map_then_remap(&self->ev, &self->recs, path);
	ASSERT_NE(NULL, m) TH_LOG("no record for page 1 of %s remapped (%s)",
				  path, strerror(errno));
	ASSERT_EQ(4096, m->pgoff);
	expect_build_id(_metadata, m, &spec, path);

	snprintf(cold, sizeof(cold), "%s/fixtures/cold.elf", exe_dir());
	base = mmap(NULL, files * 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS,
		    -1, 0);
	ASSERT_NE(MAP_FAILED, base);
	for (i = 0; i < files; i++) {
		const char *name = cold;
		int fd;

		if (i < files - 1) {
			struct elf_spec s = { .id_len = 20, .id_seed = 0x50 + i };

			snprintf(path, sizeof(path), "%s/mpc%d", self->dir, i);
			ASSERT_EQ(0, elf_write(path, &s, false));
			name = path;
		}
		fd = open(name, O_RDONLY | O_CLOEXEC);
		ASSERT_LE(0, fd);
		ASSERT_EQ(base + i * 4096,
			  mmap(base + i * 4096, 4096, PROT_READ,
			       MAP_PRIVATE | MAP_FIXED, fd, 0));
		close(fd);
	}
	n = cached_pages(cold, true);
	ASSERT_LE(0, n) TH_LOG("%s: cannot tell which of its pages are cached", cold);
	if (n) {
		munmap(base, files * 4096);
		SKIP(return, "%d pages of %.900s stay cached", n, cold);
	}
	mmap3_collect(&self->ev, &self->recs);
	rec_list_free(&self->recs);
	ASSERT_EQ(0, mprotect(base, files * 4096, PROT_READ | PROT_EXEC));
	mmap3_collect(&self->ev, &self->recs);
	n = cached_pages(cold, false);
	munmap(base, files * 4096);
	m = record_for(&self->recs, cold, base + (files - 1) * 4096);
	ASSERT_NE(NULL, m) TH_LOG("no record for %s, fifth in the range", cold);
	ASSERT_EQ(NULL, mmap3_record_problem(&m->header, true));
	ASSERT_EQ(PERF_MMAP3_BUILD_ID_UNAVAILABLE, m->build_id_status)
		TH_LOG("status %u, build ID %s, from pages that were not cached",
		       m->build_id_status, hex(m->build_id, m->build_id_size, h));
	ASSERT_EQ(0, n) TH_LOG("mprotect() read %d pages of %s, the fifth file", n, cold);
}

/*
 * A CPU-wide event that asks for mmap3 and nothing else still gets the
 * executable mappings of every task, like one asking for mmap2.
 */
TEST_F(mmap3, cpu_wide_event_with_only_mmap3_reports_mappings)
{
	struct elf_spec spec = { .id_len = 20, .id_seed = 0xe8 };
	struct mmap3_events m3, m2;
	struct rec_list m3_recs = { 0 }, m2_recs = { 0 };
	char path[PATH_MAX];
	int err;
	void *p;

	REQUIRE_MMAP3();
	err = mmap3_open_cpus(&m3, -1, EV_MMAP3, 64);
	if (err == -EACCES)
		SKIP(return, "CPU-wide events need privilege");
	ASSERT_EQ(0, err);
	ASSERT_EQ(0, mmap3_open_cpus(&m2, -1, EV_MMAP | EV_MMAP2, 64));
	snprintf(path, sizeof(path), "%s/cpu-wide", self->dir);
	ASSERT_EQ(0, elf_write(path, &spec, false));
	p = map_file(path, PROT_READ | PROT_EXEC, 0, 4096);
	ASSERT_NE(MAP_FAILED, p);
	munmap(p, 4096);
	mmap3_collect_cpus(&m3, &m3_recs);
	mmap3_collect_cpus(&m2, &m2_recs);
	mmap3_close_cpus(&m3);
	mmap3_close_cpus(&m2);

	ASSERT_EQ(1, count_records(&m2_recs, PERF_RECORD_MMAP2, path));
	ASSERT_EQ(1, count_records(&m3_recs, PERF_MMAP3_RECORD_TYPE, path));
	expect_build_id(_metadata, record_for(&m3_recs, path, p), &spec, path);
	ASSERT_EQ(getpid(), record_for(&m3_recs, path, p)->pid);
	rec_list_free(&m3_recs);
	rec_list_free(&m2_recs);
}

/*
 * Modules (ABI version 2): a module loaded, run, unloaded and loaded again
 * while an mmap3 event samples the kernel.  Each load and unload is an
 * MMAP3 record of the module's code with the build ID of its .ko, and every
 * sample taken in the module's code falls in the range of the load in
 * force when it was taken.  MMAP3_TEST_MODULE names the module's .ko
 * (selftests/mmap3_testmod, built by make vm-test against the kernel the
 * guest runs).
 */
#define TESTMOD_NAME	"mmap3_testmod"
#define TESTMOD_PROC	"/proc/mmap3_testmod"

/* The build ID in a relocatable object's note sections (a .ko) */
static int ko_build_id(const char *path, unsigned char *id, unsigned int *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), found = 0;
	Elf_Scn *scn = NULL;
	Elf *e;

	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	while (e && !found && (scn = elf_nextscn(e, scn))) {
		GElf_Shdr sh;
		Elf_Data *d;
		GElf_Nhdr n;
		size_t off = 0, name_off, desc_off, next;

		if (!gelf_getshdr(scn, &sh) || sh.sh_type != SHT_NOTE)
			continue;
		d = elf_getdata(scn, NULL);
		while (d && !found &&
		       (next = gelf_getnote(d, off, &n, &name_off, &desc_off)) > 0) {
			if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
			    !memcmp((char *)d->d_buf + name_off, "GNU", 4) &&
			    n.n_descsz >= 1 && n.n_descsz <= 20) {
				memcpy(id, (char *)d->d_buf + desc_off, n.n_descsz);
				*len = n.n_descsz;
				found = 1;
			}
			off = next;
		}
	}
	if (e)
		elf_end(e);
	close(fd);
	return found ? 0 : -1;
}

static int testmod_load(const char *path)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC), ret;

	if (fd < 0)
		return -errno;
	ret = syscall(__NR_finit_module, fd, "", 0);
	ret = ret ? -errno : 0;
	close(fd);
	return ret;
}

static int testmod_unload(void)
{
	return syscall(__NR_delete_module, TESTMOD_NAME, O_NONBLOCK) ? -errno : 0;
}

/* Runs @n steps of the module's loop */
static int testmod_spin(unsigned long n)
{
	char buf[32];
	int fd = open(TESTMOD_PROC, O_WRONLY | O_CLOEXEC), len, ret;

	if (fd < 0)
		return -errno;
	len = snprintf(buf, sizeof(buf), "%lu\n", n);
	ret = write(fd, buf, len) == len ? 0 : -errno;
	close(fd);
	return ret;
}

/* The module's address as /proc/modules gives it; 0 if not loaded */
static uint64_t testmod_address(void)
{
	char line[512], name[64];
	unsigned long long addr;
	uint64_t found = 0;
	FILE *f = fopen("/proc/modules", "r");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "%63s %*s %*s %*s %*s %llx", name, &addr) == 2 &&
		    !strcmp(name, TESTMOD_NAME))
			found = addr;
	fclose(f);
	return found;
}

/* A sample's ip and time (sample_type IP | TID | TIME) */
struct testmod_sample {
	uint64_t ip;
	uint32_t pid, tid;
	uint64_t time;
};

static bool testmod_is(const struct perf_mmap3_record *m)
{
	return m && m->pid == (uint32_t)-1 && !strcmp(m->filename, "[" TESTMOD_NAME "]");
}

/* Spins until a sample in [start, start + len) is in @recs */
static bool testmod_spin_until_sampled(struct __test_metadata *_metadata,
				       struct mmap3_event *ev, struct rec_list *recs,
				       uint64_t start, uint64_t len)
{
	size_t from = recs->n;
	int round;

	for (round = 0; round < 2000; round++) {
		size_t i;

		EXPECT_EQ(0, testmod_spin(1000000));
		mmap3_collect(ev, recs);
		for (i = from; i < recs->n; i++) {
			const struct testmod_sample *s = (const void *)(recs->v[i].hdr + 1);

			if (recs->v[i].hdr->type == PERF_RECORD_SAMPLE &&
			    s->ip - start < len)
				return true;
		}
	}
	return false;
}

TEST_F_TIMEOUT(mmap3, module_load_and_unload_are_reported, 300)
{
	const char *path = getenv("MMAP3_TEST_MODULE");
	struct mmap3_event sampler = { .fd = -1 }, user_only = { .fd = -1 };
	struct rec_list recs = { 0 }, user_recs = { 0 };
	const struct perf_mmap3_record *load[2] = { NULL }, *unload[2] = { NULL };
	const struct perf_mmap3_record *cur = NULL;
	unsigned char id[20];
	unsigned int id_len = 0;
	struct perf_event_attr attr;
	long page = sysconf(_SC_PAGESIZE);
	uint64_t addr[2];
	size_t i, in_module = 0;
	int fd, round, loads = 0, unloads = 0;

	REQUIRE_MMAP3();
	if (!path)
		SKIP(return, "MMAP3_TEST_MODULE does not name the test module's .ko");
	ASSERT_EQ(0, ko_build_id(path, id, &id_len)) TH_LOG("%s has no build ID", path);
	testmod_unload();	/* left by a run that did not finish */

	/* Samples of this task, kernel included, with the mmap3 records */
	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_CPU_CLOCK;
	attr.sample_period = 100000;
	attr.sample_type = PERF_SAMPLE_IP | PERF_SAMPLE_TID | PERF_SAMPLE_TIME;
	attr.sample_id_all = 1;
	attr.exclude_hv = 1;
	perf_mmap3_attr_set(&attr);
	fd = syscall(__NR_perf_event_open, &attr, 0, -1, -1, PERF_FLAG_FD_CLOEXEC);
	ASSERT_LE(0, fd) TH_LOG("perf_event_open: %s", strerror(errno));
	sampler.fd = fd;
	sampler.data_size = RING_PAGES * page;
	sampler.base = mmap(NULL, (RING_PAGES + 1) * page, PROT_READ | PROT_WRITE,
			    MAP_SHARED, fd, 0);
	ASSERT_NE(MAP_FAILED, sampler.base);
	/* An event that excludes the kernel must not learn its addresses */
	ASSERT_EQ(0, mmap3_open(&user_only, 0, -1, EV_MMAP3, 16));

	for (round = 0; round < 2; round++) {
		int err = testmod_load(path);

		ASSERT_EQ(0, err) TH_LOG("finit_module(%s): %s", path, strerror(-err));
		addr[round] = testmod_address();
		mmap3_collect(&sampler, &recs);
		for (i = 0; i < recs.n && !load[round]; i++)
			if (testmod_is(as_mmap3(&recs.v[i])) &&
			    !(as_mmap3(&recs.v[i])->mmap3_flags & PERF_MMAP3_UNLOADED) &&
			    (round == 0 || as_mmap3(&recs.v[i]) != load[0]))
				load[round] = as_mmap3(&recs.v[i]);
		ASSERT_NE(NULL, load[round]) TH_LOG("no record of load %d", round + 1);
		ASSERT_EQ(addr[round], load[round]->addr);
		ASSERT_TRUE(testmod_spin_until_sampled(_metadata, &sampler, &recs,
						       load[round]->addr, load[round]->len))
			TH_LOG("no sample in the module's code");
		err = testmod_unload();
		ASSERT_EQ(0, err) TH_LOG("delete_module: %s", strerror(-err));
		mmap3_collect(&sampler, &recs);
	}
	mmap3_collect(&user_only, &user_recs);

	/* The records, in order: load, unload, load, unload */
	for (i = 0; i < recs.n; i++) {
		const struct perf_mmap3_record *m = as_mmap3(&recs.v[i]);
		const struct testmod_sample *s = (const void *)(recs.v[i].hdr + 1);

		if (m)
			ASSERT_EQ(NULL, mmap3_record_problem(recs.v[i].hdr, true))
				TH_LOG("%s: %s", m->filename,
				       mmap3_record_problem(recs.v[i].hdr, true));
		if (testmod_is(m)) {
			bool gone = m->mmap3_flags & PERF_MMAP3_UNLOADED;

			ASSERT_EQ(PERF_RECORD_MISC_KERNEL,
				  m->header.misc & PERF_RECORD_MISC_CPUMODE_MASK);
			ASSERT_EQ((uint32_t)-1, m->tid);
			ASSERT_EQ(0, m->ino);
			ASSERT_EQ(PROT_READ | PROT_EXEC, m->prot);
			ASSERT_NE(0, m->len);
			ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status);
			ASSERT_EQ(id_len, m->build_id_size);
			ASSERT_EQ(0, memcmp(id, m->build_id, id_len));
			if (!gone) {
				ASSERT_EQ(NULL, cur) TH_LOG("a load before the unload");
				ASSERT_GT(2, loads);
				ASSERT_EQ(load[loads], m);
				cur = m;
				loads++;
			} else {
				ASSERT_NE(NULL, cur) TH_LOG("an unload without a load");
				ASSERT_EQ(cur->addr, m->addr);
				ASSERT_EQ(cur->len, m->len);
				unload[unloads++] = m;
				cur = NULL;
			}
			continue;
		}
		if (recs.v[i].hdr->type != PERF_RECORD_SAMPLE)
			continue;
		/* A sample in either load's range is in the one in force */
		if (s->ip - load[0]->addr < load[0]->len ||
		    s->ip - load[1]->addr < load[1]->len) {
			ASSERT_NE(NULL, cur) TH_LOG("sample at %#llx with no module loaded",
						    (unsigned long long)s->ip);
			ASSERT_GT(cur->len, s->ip - cur->addr);
			in_module++;
		}
	}
	ASSERT_EQ(2, loads);
	ASSERT_EQ(2, unloads);
	ASSERT_NE(NULL, unload[1]);
	ASSERT_LE(2, in_module);
	TH_LOG("%zu samples in the module's code; loaded at %#llx, then at %#llx",
	       in_module, (unsigned long long)addr[0], (unsigned long long)addr[1]);

	for (i = 0; i < user_recs.n; i++) {
		const struct perf_mmap3_record *m = as_mmap3(&user_recs.v[i]);

		ASSERT_FALSE(m && m->pid == (uint32_t)-1)
			TH_LOG("an event excluding the kernel got %s at %#llx",
			       m->filename, (unsigned long long)m->addr);
	}
	mmap3_close(&sampler);
	mmap3_close(&user_only);
	rec_list_free(&recs);
	rec_list_free(&user_recs);
}

/* Eight threads map, unmap and replace files under a system-wide event */

#define STRESS_THREADS	8
#define STRESS_ROUNDS	150

#define STRESS_VERSIONS	16	/* build IDs each thread cycles through */

struct stress_thread {
	pthread_t tid;
	char path[PATH_MAX];
	int index;
	int err;
	unsigned int mapped[STRESS_VERSIONS];	/* times each version was mapped */
	unsigned int seen[STRESS_VERSIONS];	/* times a record reported it */
};

static unsigned char stress_seed(int thread, int version)
{
	return thread * STRESS_VERSIONS + version;
}

static void *stress_fn(void *arg)
{
	struct stress_thread *t = arg;
	int round;

	for (round = 0; round < STRESS_ROUNDS && !t->err; round++) {
		int version = (round * 7) % STRESS_VERSIONS;
		struct elf_spec spec = { .id_len = 20,
					 .id_seed = stress_seed(t->index, version) };
		void *p;

		if (round % 2)
			t->err = elf_rewrite_in_place(t->path, &spec);
		else
			t->err = elf_write(t->path, &spec, true);
		if (t->err)
			break;
		p = map_file(t->path, PROT_READ | PROT_EXEC, 0, 4096);
		if (p == MAP_FAILED) {
			t->err = -errno;
			break;
		}
		munmap(p, 4096);
		t->mapped[version]++;
		/* Data mappings too, anonymous and file-backed */
		p = mmap(NULL, 8192, PROT_READ | PROT_WRITE,
			 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p != MAP_FAILED)
			munmap(p, 8192);
	}
	return NULL;
}

/*
 * The harness's default 30 s (120 s under make vm-test-debug) was not
 * enough for 8 x 150 replacements on the KASAN kernel of a loaded machine:
 * the timeout only bounds a hang.
 */
TEST_F_TIMEOUT(mmap3, threads_replacing_files_records_well_formed, 300)
{
	struct stress_thread threads[STRESS_THREADS];
	bool joined[STRESS_THREADS] = { false };
	struct mmap3_events evs;
	size_t r, mine = 0;
	char h[41];
	int i, err, done = 0;

	REQUIRE_MMAP3();
	err = mmap3_open_cpus(&evs, -1, EV_MMAP3 | EV_DATA, 512);
	if (err == -EACCES)
		SKIP(return, "system-wide events need privilege");
	ASSERT_EQ(0, err) TH_LOG("%s", strerror(-err));
	for (i = 0; i < STRESS_THREADS; i++) {
		memset(&threads[i], 0, sizeof(threads[i]));
		threads[i].index = i;
		snprintf(threads[i].path, sizeof(threads[i].path), "%s/t%d",
			 self->dir, i);
		ASSERT_EQ(0, pthread_create(&threads[i].tid, NULL, stress_fn,
					    &threads[i]));
	}
	/* Drain while they run, so that nothing is lost */
	while (!done) {
		done = 1;
		for (i = 0; i < STRESS_THREADS; i++) {
			if (!joined[i])
				joined[i] = !pthread_tryjoin_np(threads[i].tid, NULL);
			done &= joined[i];
		}
		mmap3_collect_cpus(&evs, &self->recs);
		usleep(1000);
	}
	for (i = 0; i < STRESS_THREADS; i++) {
		ASSERT_EQ(0, threads[i].err) TH_LOG("thread %d: %s", i,
						    strerror(-threads[i].err));
	}
	mmap3_collect_cpus(&evs, &self->recs);
	mmap3_close_cpus(&evs);

	ASSERT_EQ(0, self->recs.bad);
	for (r = 0; r < self->recs.n; r++) {
		const struct perf_mmap3_record *m = as_mmap3(&self->recs.v[r]);
		const char *problem;
		unsigned int b;

		if (!m)
			continue;
		problem = mmap3_record_problem(&m->header, true);
		ASSERT_EQ(NULL, problem) TH_LOG("record %zu: %s", r, problem);
		if (strncmp(m->filename, self->dir, strlen(self->dir)) ||
		    !(m->prot & PROT_EXEC))
			continue;
		/* Our files: found, and one of the versions written */
		mine++;
		ASSERT_EQ(PERF_MMAP3_BUILD_ID_FOUND, m->build_id_status)
			TH_LOG("%s status %u", m->filename, m->build_id_status);
		ASSERT_EQ(20, m->build_id_size);
		for (b = 1; b < 20; b++) {
			ASSERT_EQ((unsigned char)(m->build_id[0] + b), m->build_id[b])
				TH_LOG("%s: %s", m->filename, hex(m->build_id, 20, h));
		}
		for (i = 0; i < STRESS_THREADS; i++) {
			if (strcmp(m->filename, threads[i].path))
				continue;
			b = (unsigned char)(m->build_id[0] - stress_seed(i, 0));
			ASSERT_LT(b, STRESS_VERSIONS)
				TH_LOG("%s: %s", m->filename, hex(m->build_id, 20, h));
			threads[i].seen[b]++;
		}
	}
	/* Each mapping reported the version written just before it */
	for (i = 0; i < STRESS_THREADS; i++) {
		unsigned int v;

		for (v = 0; v < STRESS_VERSIONS; v++) {
			ASSERT_EQ(threads[i].mapped[v], threads[i].seen[v])
				TH_LOG("thread %d version %u", i, v);
		}
	}
	TH_LOG("%zu records, %zu for our files, %llu lost", self->recs.n, mine,
	       (unsigned long long)self->recs.lost);
	ASSERT_EQ(0, self->recs.lost);
	ASSERT_EQ(STRESS_THREADS * STRESS_ROUNDS, mine);
}

/*
 * MMAP3_TEST_TIMEOUT_SCALE=N multiplies every test's harness timeout by N
 * (1..100): the debug kernel (make vm-test-debug: lockdep, KASAN, kmemleak)
 * runs the same tests several times slower under TCG.  The 6.1 harness has
 * no option for it, so main() scales the registered tests' timeouts before
 * the harness runs them.  A test that still times out is killed with its
 * process group; the sysctls it set are restored by the next test's
 * FIXTURE_SETUP or at exit (SYSCTL_JOURNAL).
 */
#define main harness_main
TEST_HARNESS_MAIN
#undef main

int main(int argc, char **argv)
{
	const char *env = getenv("MMAP3_TEST_TIMEOUT_SCALE");
	struct __fixture_metadata *f;
	struct __test_metadata *t;
	char *end;
	long scale;

	if (env && *env) {
		scale = strtol(env, &end, 10);
		if (*end || scale < 1 || scale > 100) {
			fprintf(stderr, "MMAP3_TEST_TIMEOUT_SCALE=%s: want 1..100\n", env);
			return 2;
		}
		for (f = __fixture_list; f; f = f->next)
			for (t = f->tests; t; t = t->next)
				t->timeout *= scale;
		fprintf(stderr, "# test timeouts scaled by %ld (MMAP3_TEST_TIMEOUT_SCALE)\n",
			scale);
	}
	return harness_main(argc, argv);
}
