// SPDX-License-Identifier: GPL-2.0
/*
 * coda_venus: a minimal Coda cache manager ("venus") for the
 * PERF_RECORD_MMAP3 selftests.
 *
 *   coda_venus CACHE_DIR MOUNTPOINT
 *
 * Mounts Coda on MOUNTPOINT and serves one read-only directory: the regular
 * files of CACHE_DIR, by name.  Like the real venus, it hands the kernel an
 * open container file for each open of a Coda file (CODA_OPEN_BY_FD), and
 * the kernel does all I/O, and all mappings, on that container file.  The
 * container of NAME is CACHE_DIR/NAME as it is at the open (a symlink is
 * followed): a new version of a file, written to another file and renamed
 * over NAME, is what the next open gets, as after venus has fetched one.
 *
 * The protocol is include/uapi/linux/coda.h: a read() of the device returns
 * one upcall (struct coda_in_hdr, then its arguments); a write() answers it
 * (struct coda_out_hdr with the same unique, then the results).  Upcalls
 * served: CODA_ROOT, CODA_GETATTR, CODA_LOOKUP, CODA_ACCESS,
 * CODA_OPEN_BY_FD, CODA_CLOSE and CODA_ACCESS_INTENT; every other one is
 * answered EOPNOTSUPP (the kernel makes do: statfs() then reports made-up
 * numbers), except those the kernel does not wait for.
 *
 * Standard output has one line per upcall of these kinds, written before
 * it is answered, for a test to count:
 *   open PID NAME INO        NAME opened by task PID; INO: its container
 *   close PID NAME           the last close of that open file
 *   intent PID NAME TYPE     CODA_ACCESS_INTENT: TYPE is read, write, mmap,
 *                            read_finish or write_finish
 *
 * SIGTERM, SIGINT and SIGHUP stop the daemon: it closes the device (which
 * fails every upcall still pending), detaches the mount and exits 0.  Errors
 * at start: a one-line message on stderr and exit status 1.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <unistd.h>
/* <linux/coda.h> includes <linux/time.h>, whose structs <time.h> has */
#define _LINUX_TIME_H
#include <linux/types.h>
#include <linux/coda.h>

#define PSDEV_MAJOR	67	/* CODA_PSDEV_MAJOR, not in the uapi header */
#define PSDEV_MINORS	5	/* MAX_CODADEVS */
#define FID_MAGIC	0x6d6d3376	/* "mm3v", in every fid we hand out */
#define MAX_NODES	64	/* names ever looked up */
#define ARRAY_SIZE(a)	(sizeof(a) / sizeof((a)[0]))

static int cache_fd = -1;
static const char *mnt;
static struct coda_mount_data mount_data = { .version = CODA_MOUNT_VERSION };

/* fid.opaque[3] is 1 for the root, 2 + i for node_name[i] */
static char *node_name[MAX_NODES];
static int nr_nodes;

/* An upcall: the kernel's largest is below VC_MAXMSGSIZE */
static union {
	union inputArgs in;
	char bytes[VC_MAXMSGSIZE];
} msg;

static struct CodaFid fid_of(int index)
{
	return (struct CodaFid){ .opaque = { FID_MAGIC, 0, 0, index } };
}

static bool is_root(const struct CodaFid *fid)
{
	struct CodaFid root = fid_of(1);

	return !memcmp(fid, &root, sizeof(root));
}

/* The name a fid stands for, or NULL (the root, or not one of ours) */
static const char *name_of(const struct CodaFid *fid)
{
	int i = fid->opaque[3] - 2;

	if (fid->opaque[0] != FID_MAGIC || fid->opaque[1] || fid->opaque[2] ||
	    i < 0 || i >= nr_nodes)
		return NULL;
	return node_name[i];
}

/* The fid of @name, 0 in opaque[0] if the table is full */
static struct CodaFid node_of(const char *name)
{
	int i;

	for (i = 0; i < nr_nodes; i++)
		if (!strcmp(node_name[i], name))
			return fid_of(2 + i);
	if (nr_nodes == MAX_NODES)
		return (struct CodaFid){ { 0 } };
	node_name[nr_nodes] = strdup(name);
	if (!node_name[nr_nodes])
		return (struct CodaFid){ { 0 } };
	return fid_of(2 + nr_nodes++);
}

static struct coda_timespec coda_time(struct timespec ts)
{
	return (struct coda_timespec){ .tv_sec = ts.tv_sec, .tv_nsec = ts.tv_nsec };
}

/* Attributes of @fid as its container has them now; 0 or -errno */
static int fid_attr(const struct CodaFid *fid, struct coda_vattr *attr)
{
	const char *name = name_of(fid);
	struct stat st;

	if (is_root(fid)) {
		if (fstat(cache_fd, &st))
			return -errno;
	} else {
		if (!name)
			return -ENOENT;
		if (fstatat(cache_fd, name, &st, 0))
			return -errno;
		if (!S_ISREG(st.st_mode))
			return -ENOENT;
	}
	memset(attr, 0, sizeof(*attr));
	attr->va_type = S_ISDIR(st.st_mode) ? C_VDIR : C_VREG;
	attr->va_mode = st.st_mode & 07555;	/* a read-only view */
	attr->va_nlink = S_ISDIR(st.st_mode) ? 2 : 1;
	attr->va_uid = st.st_uid;
	attr->va_gid = st.st_gid;
	attr->va_fileid = coda_f2i(fid);
	attr->va_size = st.st_size;
	attr->va_blocksize = 4096;
	attr->va_atime = coda_time(st.st_atim);
	attr->va_mtime = coda_time(st.st_mtim);
	attr->va_ctime = coda_time(st.st_ctim);
	attr->va_bytes = st.st_blocks * 512;
	return 0;
}

static const char *intent_type(int type)
{
	static const char *const names[] = {
		[CODA_ACCESS_TYPE_READ]		= "read",
		[CODA_ACCESS_TYPE_WRITE]	= "write",
		[CODA_ACCESS_TYPE_MMAP]		= "mmap",
		[CODA_ACCESS_TYPE_READ_FINISH]	= "read_finish",
		[CODA_ACCESS_TYPE_WRITE_FINISH]	= "write_finish",
	};

	if (type < 0 || type >= (int)ARRAY_SIZE(names) || !names[type])
		return "unknown";
	return names[type];
}

static void answer(int dev, const void *reply, size_t size)
{
	ssize_t n = write(dev, reply, size);

	if (n != (ssize_t)size)
		fprintf(stderr, "coda_venus: reply of %zu bytes: %s\n", size,
			n < 0 ? strerror(errno) : "short write");
}

/* Answer with the result alone: @err is 0 or -errno */
static void answer_result(int dev, const struct coda_in_hdr *ih, int err)
{
	/* Venus answers with a positive errno, the kernel negates it */
	struct coda_out_hdr oh = {
		.opcode = ih->opcode, .unique = ih->unique, .result = -err,
	};

	answer(dev, &oh, sizeof(oh));
}

/* The name in a CODA_LOOKUP of @size bytes, or NULL */
static const char *lookup_name(size_t size)
{
	int off = msg.in.coda_lookup.name;
	const char *name;

	if (off < (int)sizeof(struct coda_lookup_in) || off >= (int)size)
		return NULL;
	name = msg.bytes + off;
	if (!memchr(name, '\0', size - off) || !*name || strchr(name, '/') ||
	    !strcmp(name, ".") || !strcmp(name, ".."))
		return NULL;
	return name;
}

static void do_lookup(int dev, size_t size)
{
	struct coda_lookup_out out = {
		.oh = { .opcode = CODA_LOOKUP, .unique = msg.in.ih.unique },
		.vtype = C_VREG,
	};
	const char *name = lookup_name(size);
	struct stat st;

	if (!name || !is_root(&msg.in.coda_lookup.VFid)) {
		answer_result(dev, &msg.in.ih, -ENOENT);
		return;
	}
	if (fstatat(cache_fd, name, &st, 0) || !S_ISREG(st.st_mode)) {
		answer_result(dev, &msg.in.ih, -ENOENT);
		return;
	}
	out.VFid = node_of(name);
	if (!out.VFid.opaque[0]) {
		answer_result(dev, &msg.in.ih, -ENFILE);
		return;
	}
	answer(dev, &out, sizeof(out));
}

static void do_getattr(int dev)
{
	struct coda_getattr_out out = {
		.oh = { .opcode = CODA_GETATTR, .unique = msg.in.ih.unique },
	};

	int err = fid_attr(&msg.in.coda_getattr.VFid, &out.attr);

	if (err)
		answer_result(dev, &msg.in.ih, err);
	else
		answer(dev, &out, sizeof(out));
}

static void do_open(int dev)
{
	const struct coda_open_by_fd_in *in = &msg.in.coda_open_by_fd;
	struct coda_open_by_fd_out out = {
		.oh = { .opcode = CODA_OPEN_BY_FD, .unique = in->ih.unique },
	};
	const char *name = name_of(&in->VFid);
	struct stat st;
	int fd;

	if (!name) {
		answer_result(dev, &in->ih, is_root(&in->VFid) ? -EOPNOTSUPP : -ENOENT);
		return;
	}
	if (in->flags & (C_O_WRITE | C_O_TRUNC | C_O_CREAT)) {
		answer_result(dev, &in->ih, -EROFS);
		return;
	}
	fd = openat(cache_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || fstat(fd, &st)) {
		answer_result(dev, &in->ih, -errno);
		if (fd >= 0)
			close(fd);
		return;
	}
	printf("open %d %s %llu\n", in->ih.pid, name,
	       (unsigned long long)st.st_ino);
	/* The kernel takes its own reference while it handles the write */
	out.fd = fd;
	answer(dev, &out, sizeof(out));
	close(fd);
}

/* Handle the upcall of @size bytes in msg */
static void serve(int dev, size_t size)
{
	const struct coda_in_hdr *ih = &msg.in.ih;
	const char *name;
	int type;

	switch (ih->opcode) {
	case CODA_ROOT: {
		struct coda_root_out out = {
			.oh = { .opcode = CODA_ROOT, .unique = ih->unique },
			.VFid = fid_of(1),
		};

		answer(dev, &out, sizeof(out));
		return;
	}
	case CODA_GETATTR:
		if (size < sizeof(struct coda_getattr_in))
			break;
		do_getattr(dev);
		return;
	case CODA_LOOKUP:
		if (size < sizeof(struct coda_lookup_in))
			break;
		do_lookup(dev, size);
		return;
	case CODA_ACCESS:
		if (size < sizeof(struct coda_access_in))
			break;
		answer_result(dev, ih, 0);
		return;
	case CODA_OPEN_BY_FD:
		if (size < sizeof(struct coda_open_by_fd_in))
			break;
		do_open(dev);
		return;
	case CODA_CLOSE:
		if (size < sizeof(struct coda_close_in))
			break;
		name = name_of(&msg.in.coda_close.VFid);
		printf("close %d %s\n", ih->pid, name ? name : "?");
		answer_result(dev, ih, 0);
		return;
	case CODA_ACCESS_INTENT:
		if (size < sizeof(struct coda_access_intent_in))
			break;
		name = name_of(&msg.in.coda_access_intent.VFid);
		type = msg.in.coda_access_intent.type;
		printf("intent %d %s %s\n", ih->pid, name ? name : "?",
		       intent_type(type));
		/* The kernel does not wait for the end of a read or write */
		if (type != CODA_ACCESS_TYPE_READ_FINISH &&
		    type != CODA_ACCESS_TYPE_WRITE_FINISH)
			answer_result(dev, ih, 0);
		return;
	case CODA_SIGNAL:
		/* The kernel gave up on an upcall: nothing to answer */
		return;
	default:
		answer_result(dev, ih, -EOPNOTSUPP);
		return;
	}
	fprintf(stderr, "coda_venus: upcall %u of %zu bytes is too short\n",
		ih->opcode, size);
	answer_result(dev, ih, -EINVAL);
}

/* Open a free Coda device, making its node if devtmpfs has not */
static int open_psdev(void)
{
	char path[64];
	int minor, fd = -1;

	for (minor = 0; minor < PSDEV_MINORS; minor++) {
		snprintf(path, sizeof(path), "/dev/cfs%d", minor);
		fd = open(path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
		if (fd < 0 && errno == ENOENT) {
			/* A node of our own, in the cache directory */
			snprintf(path, sizeof(path), ".cfs%d", minor);
			if (mknodat(cache_fd, path, S_IFCHR | 0600,
				    makedev(PSDEV_MAJOR, minor)))
				return -1;
			fd = openat(cache_fd, path, O_RDWR | O_CLOEXEC | O_NONBLOCK);
			unlinkat(cache_fd, path, 0);
		}
		if (fd >= 0 || errno != EBUSY)
			return fd;
	}
	return -1;
}

/*
 * mount() waits for CODA_ROOT, which the main loop answers: it runs in a
 * thread of its own.
 */
static void *mount_thread(void *arg)
{
	if (mount("coda", mnt, "coda", 0, &mount_data)) {
		fprintf(stderr, "coda_venus: mount on %s: %s\n", mnt, strerror(errno));
		fflush(stderr);
		_exit(1);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	struct pollfd pfd[2];
	pthread_t thread;
	sigset_t stop;
	int dev;

	if (argc != 3) {
		fputs("usage: coda_venus CACHE_DIR MOUNTPOINT\n", stderr);
		return 1;
	}
	mnt = argv[2];
	setvbuf(stdout, NULL, _IOLBF, 0);
	signal(SIGPIPE, SIG_IGN);	/* a test that stopped listening */

	/* Stop requests arrive through a signalfd: no race with the read */
	sigemptyset(&stop);
	sigaddset(&stop, SIGTERM);
	sigaddset(&stop, SIGINT);
	sigaddset(&stop, SIGHUP);
	if (sigprocmask(SIG_BLOCK, &stop, NULL))
		return 1;
	pfd[1].fd = signalfd(-1, &stop, SFD_CLOEXEC);
	pfd[1].events = POLLIN;

	cache_fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (cache_fd < 0 || pfd[1].fd < 0) {
		fprintf(stderr, "coda_venus: %s: %s\n", argv[1], strerror(errno));
		return 1;
	}
	dev = open_psdev();
	if (dev < 0) {
		fprintf(stderr, "coda_venus: no Coda device: %s\n", strerror(errno));
		return 1;
	}
	pfd[0].fd = dev;
	pfd[0].events = POLLIN;
	mount_data.fd = dev;
	if (pthread_create(&thread, NULL, mount_thread, NULL)) {
		fprintf(stderr, "coda_venus: cannot start the mount thread\n");
		return 1;
	}
	pthread_detach(thread);

	for (;;) {
		ssize_t n;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (!pfd[0].revents)
			continue;
		/* Non-blocking: poll() may see an upcall that is then withdrawn */
		n = read(dev, &msg, sizeof(msg));
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue;
		if (n < 0)
			break;
		if (n < (ssize_t)sizeof(struct coda_in_hdr)) {
			fprintf(stderr, "coda_venus: upcall of %zd bytes\n", n);
			continue;
		}
		serve(dev, n);
	}

	/*
	 * The device first: that fails any upcall still pending.  Unmounting
	 * first would have coda_put_super() destroy the device's mutex, which
	 * the close then takes.
	 */
	close(dev);
	umount2(mnt, MNT_DETACH);
	return 0;
}
