// SPDX-License-Identifier: GPL-2.0
#define _GNU_SOURCE
#include "mmap3_util.h"

#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <gelf.h>
#include <libelf.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SAMPLE_TYPE	(PERF_SAMPLE_TID | PERF_SAMPLE_TIME)
#define SAMPLE_ID_SIZE	MMAP3_SAMPLE_ID_SIZE	/* the trailer for SAMPLE_TYPE */

bool mmap3_supported(void)
{
	return access(PERF_MMAP3_CAP_PATH, R_OK) == 0;
}

int mmap3_open_fd(pid_t pid, int cpu, unsigned int flags)
{
	struct perf_event_attr attr;
	int fd;

	memset(&attr, 0, sizeof(attr));
	attr.size = sizeof(attr);
	attr.type = PERF_TYPE_SOFTWARE;
	attr.config = PERF_COUNT_SW_DUMMY;
	attr.sample_type = SAMPLE_TYPE;
	attr.sample_id_all = 1;
	attr.exclude_kernel = 1;
	attr.exclude_hv = 1;
	attr.wakeup_events = 1;
	attr.mmap = !!(flags & EV_MMAP);
	attr.mmap2 = !!(flags & EV_MMAP2);
	attr.build_id = !!(flags & EV_BUILD_ID);
	attr.mmap_data = !!(flags & EV_DATA);
	attr.inherit = !!(flags & EV_INHERIT);
	attr.disabled = !!(flags & EV_DISABLED);
	attr.enable_on_exec = !!(flags & EV_ENABLE_ON_EXEC);
	attr.ksymbol = !!(flags & EV_BPF);
	attr.bpf_event = !!(flags & EV_BPF);
	if (flags & EV_MMAP3)
		perf_mmap3_attr_set(&attr);

	fd = syscall(__NR_perf_event_open, &attr, pid, cpu, -1,
		     PERF_FLAG_FD_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

int mmap3_open(struct mmap3_event *ev, pid_t pid, int cpu, unsigned int flags,
	       size_t pages)
{
	long page = sysconf(_SC_PAGESIZE);
	int fd = mmap3_open_fd(pid, cpu, flags);

	memset(ev, 0, sizeof(*ev));
	ev->fd = -1;
	if (fd < 0)
		return fd;
	ev->base = mmap(NULL, (pages + 1) * page, PROT_READ | PROT_WRITE,
			MAP_SHARED, fd, 0);
	if (ev->base == MAP_FAILED) {
		int err = -errno;

		close(fd);
		ev->base = NULL;
		return err;
	}
	ev->fd = fd;
	ev->data_size = pages * page;
	return 0;
}

void mmap3_close(struct mmap3_event *ev)
{
	if (ev->base)
		munmap(ev->base, ev->data_size + sysconf(_SC_PAGESIZE));
	if (ev->fd >= 0)
		close(ev->fd);
	ev->base = NULL;
	ev->fd = -1;
}

static void ring_copy(const struct mmap3_event *ev, uint64_t pos, void *dst,
		      size_t len)
{
	const char *data = (const char *)ev->base + sysconf(_SC_PAGESIZE);
	size_t off = pos % ev->data_size;
	size_t first = len < ev->data_size - off ? len : ev->data_size - off;

	memcpy(dst, data + off, first);
	memcpy((char *)dst + first, data, len - first);
}

static void rec_list_push(struct rec_list *list, struct perf_event_header *hdr)
{
	if (list->n == list->cap) {
		list->cap = list->cap ? 2 * list->cap : 256;
		list->v = realloc(list->v, list->cap * sizeof(*list->v));
		if (!list->v)
			abort();
	}
	list->v[list->n++].hdr = hdr;
}

void mmap3_collect(struct mmap3_event *ev, struct rec_list *list)
{
	struct perf_event_mmap_page *pg = ev->base;
	uint64_t head = __atomic_load_n(&pg->data_head, __ATOMIC_ACQUIRE);
	uint64_t tail = pg->data_tail;

	while (tail < head) {
		struct perf_event_header h;
		void *copy;

		ring_copy(ev, tail, &h, sizeof(h));
		if (h.size < sizeof(h) || h.size > head - tail) {
			list->bad++;
			tail = head;
			break;
		}
		copy = malloc(h.size);
		if (!copy)
			abort();
		ring_copy(ev, tail, copy, h.size);
		if (h.type == PERF_RECORD_LOST && h.size >= 24)
			list->lost += ((uint64_t *)copy)[2];
		rec_list_push(list, copy);
		tail += h.size;
	}
	__atomic_store_n(&pg->data_tail, tail, __ATOMIC_RELEASE);
}

int mmap3_open_cpus(struct mmap3_events *evs, pid_t pid, unsigned int flags,
		    size_t pages)
{
	int ncpu = sysconf(_SC_NPROCESSORS_ONLN), cpu, err;

	evs->ev = calloc(ncpu, sizeof(*evs->ev));
	evs->n = 0;
	if (!evs->ev)
		return -ENOMEM;
	for (cpu = 0; cpu < ncpu; cpu++) {
		err = mmap3_open(&evs->ev[cpu], pid, cpu, flags, pages);
		if (err) {
			mmap3_close_cpus(evs);
			return err;
		}
		evs->n++;
	}
	return 0;
}

void mmap3_collect_cpus(struct mmap3_events *evs, struct rec_list *list)
{
	int i;

	for (i = 0; i < evs->n; i++)
		mmap3_collect(&evs->ev[i], list);
}

void mmap3_close_cpus(struct mmap3_events *evs)
{
	int i;

	for (i = 0; i < evs->n; i++)
		mmap3_close(&evs->ev[i]);
	free(evs->ev);
	evs->ev = NULL;
	evs->n = 0;
}

void rec_list_free(struct rec_list *list)
{
	size_t i;

	for (i = 0; i < list->n; i++)
		free(list->v[i].hdr);
	free(list->v);
	memset(list, 0, sizeof(*list));
}

const struct perf_mmap3_record *find_mmap3(const struct rec_list *list,
					   const char *path, size_t *from)
{
	size_t i = from ? *from : 0;

	for (; i < list->n; i++) {
		const struct perf_mmap3_record *m = as_mmap3(&list->v[i]);

		if (m && (!path || !strcmp(m->filename, path))) {
			if (from)
				*from = i + 1;
			return m;
		}
	}
	return NULL;
}

/* MMAP2: header, pid, tid, addr, len, pgoff, 24-byte union, prot, flags */
#define MMAP2_FILENAME_OFF	72

const char *mmap2_filename(const struct rec *r)
{
	if (r->hdr->type != PERF_RECORD_MMAP2 || r->hdr->size <= MMAP2_FILENAME_OFF)
		return NULL;
	return (const char *)r->hdr + MMAP2_FILENAME_OFF;
}

size_t count_records(const struct rec_list *list, uint32_t type,
		     const char *path)
{
	size_t i, n = 0;

	for (i = 0; i < list->n; i++) {
		const struct rec *r = &list->v[i];
		const char *name = NULL;

		if (r->hdr->type != type)
			continue;
		if (type == PERF_MMAP3_RECORD_TYPE)
			name = as_mmap3(r)->filename;
		else if (type == PERF_RECORD_MMAP2)
			name = mmap2_filename(r);
		else if (type == PERF_RECORD_MMAP)
			name = (const char *)r->hdr + 40;
		if (!path || (name && !strcmp(name, path)))
			n++;
	}
	return n;
}

const char *mmap3_record_problem(const struct perf_event_header *hdr,
				 bool sample_id_all)
{
	const struct perf_mmap3_record *m = (const void *)hdr;
	size_t trailer = sample_id_all ? SAMPLE_ID_SIZE : 0;
	size_t name_area, len;
	unsigned int i;

	if (hdr->type != PERF_MMAP3_RECORD_TYPE)
		return "not an MMAP3 record";
	if (hdr->size % 8)
		return "size not a multiple of 8";
	if (hdr->size < PERF_MMAP3_RECORD_FIXED_SIZE + 8 + trailer)
		return "too short";
	name_area = hdr->size - PERF_MMAP3_RECORD_FIXED_SIZE - trailer;
	len = strnlen(m->filename, name_area);
	if (len == name_area)
		return "filename not terminated";
	if (((len + 1 + 7) & ~7UL) != name_area)
		return "filename padding wrong";
	for (i = len; i < name_area; i++)
		if (m->filename[i])
			return "filename padding not zero";
	if (m->mmap3_flags & ~PERF_MMAP3_UNLOADED)
		return "unknown mmap3_flags";
	if ((m->mmap3_flags & PERF_MMAP3_UNLOADED) &&
	    (m->pid != (__u32)-1 || m->filename[0] != '['))
		return "UNLOADED on a record that is not a module's";
	if (m->build_id_status > PERF_MMAP3_BUILD_ID_STATUS_MAX)
		return "unknown status";
	if (m->build_id_size > PERF_MMAP3_BUILD_ID_MAX)
		return "build ID too long";
	if (m->build_id_status == PERF_MMAP3_BUILD_ID_FOUND && !m->build_id_size)
		return "FOUND without a build ID";
	if (m->build_id_status != PERF_MMAP3_BUILD_ID_FOUND && m->build_id_size)
		return "a build ID without FOUND";
	for (i = m->build_id_size; i < PERF_MMAP3_BUILD_ID_MAX; i++)
		if (m->build_id[i])
			return "build ID padding not zero";
	return NULL;
}

/* ELF fixtures */

#define FIX_VADDR	0x400000UL
#define FIX_CODE_OFF	0x100
#define FIX_NOTE_OFF	0x200
#define FIX_SIZE	8192

void elf_spec_build_id(const struct elf_spec *spec, unsigned char *id,
		       unsigned int *len)
{
	unsigned int i;

	for (i = 0; i < spec->id_len; i++)
		id[i] = spec->id_seed + i;
	*len = spec->id_len;
}

static size_t put_note(unsigned char *buf, size_t off, uint32_t namesz,
		       uint32_t descsz, uint32_t type, size_t ndesc,
		       unsigned char seed, size_t align)
{
	Elf64_Nhdr n = { .n_namesz = namesz, .n_descsz = descsz, .n_type = type };
	size_t i;

	memcpy(buf + off, &n, sizeof(n));
	memcpy(buf + off + sizeof(n), "GNU", 4);
	for (i = 0; i < ndesc; i++)
		buf[off + sizeof(n) + 4 + i] = seed + i;
	return sizeof(n) + 4 + ((ndesc + align - 1) & ~(align - 1));
}

static unsigned char *elf_build(const struct elf_spec *spec, size_t *out_size)
{
	size_t size = spec->size ? spec->size : FIX_SIZE;
	size_t note_off = spec->note_off ? spec->note_off : FIX_NOTE_OFF;
	size_t ehsize = spec->elf32 ? sizeof(Elf32_Ehdr) : sizeof(Elf64_Ehdr);
	size_t phoff = spec->phoff ? spec->phoff : ehsize;
	unsigned int id_len = spec->damage == ELF_OVERSIZE_ID ? 24 : spec->id_len;
	uint32_t namesz = 4, descsz = id_len, type = 3;
	static const unsigned char code[] = {
		0x31, 0xff,			/* xor %edi,%edi */
		0xb8, 0x3c, 0, 0, 0,		/* mov $60,%eax (exit) */
		0x0f, 0x05,			/* syscall */
	};
	unsigned char *buf = calloc(1, size);
	size_t align = spec->align8 ? 8 : 4, id_off = note_off;
	uint64_t note_pos, note_len, seg_len;
	uint16_t phnum = spec->second_segment ? 3 : 2;
	unsigned int k;

	if (!buf)
		abort();
	if (!id_len) {
		descsz = 16;	/* NT_GNU_ABI_TAG instead */
		type = 1;
	}
	/* Other notes first: 9-byte descriptors, so the padding matters */
	for (k = 0; k < spec->notes_before; k++)
		id_off += put_note(buf, id_off, namesz, 9, 0x100, 9, 0x33, align);
	seg_len = id_off - note_off;
	if (spec->second_segment)
		id_off += 64;
	note_len = put_note(buf, id_off, namesz, descsz, type,
			    descsz, spec->id_seed, align);
	if (!spec->second_segment)
		note_len += id_off - note_off;
	note_pos = note_off;
	if (spec->damage == ELF_NAMESZ_OVERFLOW)
		((Elf64_Nhdr *)(buf + id_off))->n_namesz = 0xffffffff;
	if (spec->damage == ELF_DESCSZ_OVERFLOW)
		((Elf64_Nhdr *)(buf + id_off))->n_descsz = 0xffffffff;
	if (spec->damage == ELF_NOTE_PAST_EOF)
		note_pos = size + 4096;
	if (spec->damage == ELF_HUGE_PHNUM)
		phnum = 0xffff;
	memcpy(buf + FIX_CODE_OFF, code, sizeof(code));

	if (spec->elf32) {
		Elf32_Ehdr *e = (Elf32_Ehdr *)buf;
		Elf32_Phdr *ph = (Elf32_Phdr *)(buf + phoff);

		memcpy(e->e_ident, ELFMAG, SELFMAG);
		e->e_ident[EI_CLASS] = ELFCLASS32;
		e->e_ident[EI_DATA] = ELFDATA2LSB;
		e->e_ident[EI_VERSION] = EV_CURRENT;
		e->e_type = ET_DYN;
		e->e_machine = EM_386;
		e->e_version = EV_CURRENT;
		e->e_phoff = phoff;
		e->e_ehsize = sizeof(*e);
		e->e_phentsize = sizeof(*ph);
		e->e_phnum = phnum;
		ph[0] = (Elf32_Phdr){ .p_type = PT_LOAD, .p_vaddr = FIX_VADDR,
			.p_filesz = size, .p_memsz = size,
			.p_flags = PF_R | PF_X, .p_align = 0x1000 };
		ph[1] = (Elf32_Phdr){ .p_type = PT_NOTE, .p_offset = note_pos,
			.p_vaddr = FIX_VADDR + note_off, .p_filesz = note_len,
			.p_memsz = note_len, .p_flags = PF_R, .p_align = align };
		if (spec->second_segment) {
			ph[1].p_filesz = seg_len;
			ph[1].p_memsz = seg_len;
			ph[2] = (Elf32_Phdr){ .p_type = PT_NOTE,
				.p_offset = spec->damage == ELF_NOTE_PAST_EOF ?
					    note_pos : id_off,
				.p_vaddr = FIX_VADDR + id_off,
				.p_filesz = note_len, .p_memsz = note_len,
				.p_flags = PF_R, .p_align = align };
		}
	} else {
		Elf64_Ehdr *e = (Elf64_Ehdr *)buf;
		Elf64_Phdr *ph = (Elf64_Phdr *)(buf + phoff);

		memcpy(e->e_ident, ELFMAG, SELFMAG);
		e->e_ident[EI_CLASS] = ELFCLASS64;
		e->e_ident[EI_DATA] = ELFDATA2LSB;
		e->e_ident[EI_VERSION] = EV_CURRENT;
		e->e_type = spec->executable ? ET_EXEC : ET_DYN;
		e->e_machine = EM_X86_64;
		e->e_version = EV_CURRENT;
		e->e_entry = spec->executable ? FIX_VADDR + FIX_CODE_OFF : 0;
		e->e_phoff = phoff;
		e->e_ehsize = sizeof(*e);
		e->e_phentsize = sizeof(*ph);
		e->e_phnum = phnum;
		ph[0] = (Elf64_Phdr){ .p_type = PT_LOAD, .p_vaddr = FIX_VADDR,
			.p_paddr = FIX_VADDR, .p_filesz = size, .p_memsz = size,
			.p_flags = PF_R | PF_X, .p_align = 0x1000 };
		ph[1] = (Elf64_Phdr){ .p_type = PT_NOTE, .p_offset = note_pos,
			.p_vaddr = FIX_VADDR + note_off, .p_filesz = note_len,
			.p_memsz = note_len, .p_flags = PF_R, .p_align = align };
		if (spec->second_segment) {
			ph[1].p_filesz = seg_len;
			ph[1].p_memsz = seg_len;
			ph[2] = (Elf64_Phdr){ .p_type = PT_NOTE,
				.p_offset = spec->damage == ELF_NOTE_PAST_EOF ?
					    note_pos : id_off,
				.p_vaddr = FIX_VADDR + id_off,
				.p_filesz = note_len, .p_memsz = note_len,
				.p_flags = PF_R, .p_align = align };
		}
	}
	if (spec->damage == ELF_TRUNCATED)
		size = phoff + 20;
	*out_size = size;
	return buf;
}

static int write_all(int fd, const unsigned char *buf, size_t size)
{
	size_t done = 0;

	while (done < size) {
		ssize_t n = pwrite(fd, buf + done, size - done, done);

		if (n < 0)
			return -errno;
		done += n;
	}
	return 0;
}

int elf_write(const char *path, const struct elf_spec *spec, bool replace)
{
	char tmp[4096];
	size_t size;
	unsigned char *buf = elf_build(spec, &size);
	const char *target = path;
	int fd, err;

	if (replace) {
		snprintf(tmp, sizeof(tmp), "%s.tmp.%d", path, getpid());
		target = tmp;
	}
	fd = open(target, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (fd < 0) {
		free(buf);
		return -errno;
	}
	err = write_all(fd, buf, size);
	free(buf);
	if (close(fd) && !err)
		err = -errno;
	if (!err && replace && rename(tmp, path))
		err = -errno;
	return err;
}

int elf_write_fd(int fd, const struct elf_spec *spec)
{
	size_t size;
	unsigned char *buf = elf_build(spec, &size);
	int err = write_all(fd, buf, size);

	if (!err && ftruncate(fd, size))
		err = -errno;
	free(buf);
	return err;
}

int elf_rewrite_in_place(const char *path, const struct elf_spec *spec)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	int err;

	if (fd < 0)
		return -errno;
	err = elf_write_fd(fd, spec);
	if (close(fd) && !err)
		err = -errno;
	return err;
}

/* Userspace build-ID reading, independent of the kernel's parser */

static int elf_build_id(Elf *e, unsigned char *id, unsigned int *len)
{
	size_t phnum, i;

	if (elf_kind(e) != ELF_K_ELF || elf_getphdrnum(e, &phnum))
		return 0;
	for (i = 0; i < phnum; i++) {
		GElf_Phdr ph;
		Elf_Data *d;
		GElf_Nhdr n;
		size_t off = 0, name_off, desc_off, next;

		if (!gelf_getphdr(e, i, &ph) || ph.p_type != PT_NOTE)
			continue;
		d = elf_getdata_rawchunk(e, ph.p_offset, ph.p_filesz,
					 ph.p_align == 8 ? ELF_T_NHDR8 : ELF_T_NHDR);
		if (!d)
			continue;
		while ((next = gelf_getnote(d, off, &n, &name_off, &desc_off)) > 0) {
			if (n.n_type == NT_GNU_BUILD_ID && n.n_namesz == 4 &&
			    !memcmp((char *)d->d_buf + name_off, "GNU", 4) &&
			    n.n_descsz >= 1 && n.n_descsz <= 20) {
				memcpy(id, (char *)d->d_buf + desc_off, n.n_descsz);
				*len = n.n_descsz;
				return 1;
			}
			off = next;
		}
	}
	return 0;
}

int file_build_id(const char *path, unsigned char *id, unsigned int *len)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	Elf *e;
	int ret;

	if (fd < 0)
		return -1;
	elf_version(EV_CURRENT);
	e = elf_begin(fd, ELF_C_READ, NULL);
	if (!e) {
		close(fd);
		return -1;
	}
	ret = elf_build_id(e, id, len);
	elf_end(e);
	close(fd);
	return ret;
}

int mem_build_id(const void *image, size_t size, unsigned char *id,
		 unsigned int *len)
{
	Elf *e;
	int ret;

	elf_version(EV_CURRENT);
	e = elf_memory((char *)image, size);
	if (!e)
		return -1;
	ret = elf_build_id(e, id, len);
	elf_end(e);
	return ret;
}

const char *hex(const unsigned char *id, unsigned int len, char *buf)
{
	unsigned int i;

	for (i = 0; i < len && i < 20; i++)
		sprintf(buf + 2 * i, "%02x", id[i]);
	buf[2 * i] = '\0';
	return buf;
}

/* The FUSE backing daemon and the Coda cache manager */

#define FUSE_SUPER_MAGIC	0x65735546
#define CODA_SUPER_MAGIC	0x73757245

long long monotonic_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1000LL + ts.tv_nsec / 1000000;
}

int wait_exit(pid_t pid, int *status, int timeout_ms)
{
	long long end = monotonic_ms() + timeout_ms;

	for (;;) {
		pid_t r = waitpid(pid, status, WNOHANG);

		if (r == pid)
			return 1;
		if (r < 0 && errno != EINTR)
			return -1;
		if (monotonic_ms() >= end)
			return 0;
		usleep(10 * 1000);
	}
}

void fuse_backing_init(struct fuse_backing *fb)
{
	memset(fb, 0, sizeof(*fb));
	fb->report = -1;
}

static bool is_mount_of(const char *path, long magic)
{
	struct statfs sfs;

	return !statfs(path, &sfs) && sfs.f_type == magic;
}

/*
 * Run @argv[0] with @argv, its standard output piped to @fb->report, and
 * wait for at most @timeout_ms until @mnt is a mount of the file system
 * whose magic number is @magic.
 */
static const char *mount_daemon_start(struct fuse_backing *fb,
				      const char *const *argv, const char *mnt,
				      long magic, int timeout_ms)
{
	static char problem[PATH_MAX + 128];
	const char *daemon = argv[0];
	pid_t parent = getpid();
	long long end;
	int out[2], status;

	fuse_backing_init(fb);
	snprintf(fb->mnt, sizeof(fb->mnt), "%s", mnt);
	if (access(daemon, X_OK)) {
		snprintf(problem, sizeof(problem), "%s: %s", daemon, strerror(errno));
		return problem;
	}
	if (pipe2(out, O_CLOEXEC))
		return "pipe2() failed";
	fb->pid = fork();
	if (fb->pid < 0) {
		fb->pid = 0;
		close(out[0]);
		close(out[1]);
		return "fork() failed";
	}
	if (!fb->pid) {
		/* Stop (and so unmount) when the test goes, however it goes */
		if (prctl(PR_SET_PDEATHSIG, SIGTERM) || getppid() != parent)
			_exit(1);
		if (dup2(out[1], STDOUT_FILENO) < 0)
			_exit(1);
		execv(daemon, (char *const *)argv);
		_exit(1);
	}
	close(out[1]);
	fb->report = out[0];

	end = monotonic_ms() + timeout_ms;
	while (!is_mount_of(mnt, magic)) {
		if (waitpid(fb->pid, &status, WNOHANG) == fb->pid) {
			fb->pid = 0;
			fuse_backing_stop(fb, 0);
			snprintf(problem, sizeof(problem),
				 "%s exited (status 0x%x) before %s was mounted",
				 daemon, status, mnt);
			return problem;
		}
		if (monotonic_ms() >= end) {
			fuse_backing_stop(fb, timeout_ms);
			snprintf(problem, sizeof(problem),
				 "%s not mounted %d ms after starting %s",
				 mnt, timeout_ms, daemon);
			return problem;
		}
		usleep(10 * 1000);
	}
	return NULL;
}

const char *fuse_backing_start(struct fuse_backing *fb, const char *daemon,
			       const char *backing, const char *mnt,
			       const char *hang, unsigned int flags,
			       int timeout_ms)
{
	const char *argv[8];
	int argc = 0;

	argv[argc++] = daemon;
	if (flags & FUSE_BACKING_LOG)
		argv[argc++] = "--log";
	if (flags & FUSE_BACKING_SYNC_READ)
		argv[argc++] = "--sync-read";
	if (hang) {
		argv[argc++] = "--hang";
		argv[argc++] = hang;
	}
	argv[argc++] = backing;
	argv[argc++] = mnt;
	argv[argc] = NULL;
	return mount_daemon_start(fb, argv, mnt, FUSE_SUPER_MAGIC, timeout_ms);
}

const char *coda_venus_start(struct fuse_backing *fb, const char *daemon,
			     const char *cache, const char *mnt, int timeout_ms)
{
	const char *const argv[] = { daemon, cache, mnt, NULL };

	return mount_daemon_start(fb, argv, mnt, CODA_SUPER_MAGIC, timeout_ms);
}

int fuse_backing_report(struct fuse_backing *fb, char *buf, size_t size,
			int timeout_ms)
{
	long long end = monotonic_ms() + timeout_ms;

	if (fb->report < 0)
		return -1;
	for (;;) {
		char *nl = memchr(fb->line, '\n', fb->len);
		struct pollfd pfd = { .fd = fb->report, .events = POLLIN };
		long long left;
		ssize_t n;

		if (nl) {
			size_t len = nl - fb->line;

			snprintf(buf, size, "%.*s", (int)len, fb->line);
			memmove(fb->line, nl + 1, fb->len - len - 1);
			fb->len -= len + 1;
			return 1;
		}
		if (fb->len == sizeof(fb->line))
			fb->len = 0;	/* no such lines: drop the junk */
		left = end - monotonic_ms();
		if (left < 0)
			left = 0;
		n = poll(&pfd, 1, left);
		if (n < 0 && errno != EINTR)
			return -1;
		if (n <= 0) {
			if (monotonic_ms() >= end)
				return 0;
			continue;
		}
		n = read(fb->report, fb->line + fb->len,
			 sizeof(fb->line) - fb->len);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return -1;
		fb->len += n;
	}
}

void fuse_backing_stop(struct fuse_backing *fb, int timeout_ms)
{
	int status;

	if (fb->pid > 0) {
		kill(fb->pid, SIGTERM);
		if (wait_exit(fb->pid, &status, timeout_ms) != 1) {
			/* Its /dev/fuse closes with it: the connection aborts */
			kill(fb->pid, SIGKILL);
			waitpid(fb->pid, &status, 0);
		}
		fb->pid = 0;
	}
	if (fb->report >= 0)
		close(fb->report);
	fb->report = -1;
	/*
	 * The daemon detaches the mount itself unless it was killed; then
	 * the mount is dead (ENOTCONN) but still there.  EINVAL (not a mount
	 * point any more) is the usual answer.
	 */
	if (fb->mnt[0])
		umount2(fb->mnt, MNT_DETACH);
	fb->mnt[0] = '\0';
	fb->len = 0;
}
