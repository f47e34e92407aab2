// SPDX-License-Identifier: GPL-2.0
/*
 * fuse_backing: a read-only FUSE view of the regular files of one directory,
 * for the PERF_RECORD_MMAP3 selftests.
 *
 *   fuse_backing [--log] [--sync-read] [--hang NAME] BACKING_DIR MOUNTPOINT
 *
 * The kernel caches nothing it could not revalidate: entries and attributes
 * expire at once and every open drops the file's page cache (no keep_cache),
 * so a backing file rewritten behind the kernel's back reads as its new
 * contents, the way an NFS client sees a file another machine rewrote.  The
 * kernel never gets write access to a file here: only the backing directory
 * changes.  A read() revalidates the attributes first (auto_inval_data), as
 * an NFS client does.
 *
 * Reads of the file NAME never get data.  The daemon holds each one and
 * answers it only when the kernel interrupts it (the reading task got a
 * signal: EINTR) or when the daemon stops (EIO), like a hard NFS mount of a
 * server that went away: the read waits until the reader is killed.
 *
 * With --sync-read the daemon does not take FUSE_CAP_ASYNC_READ: the kernel
 * then waits for each read inside ->readahead(), as it does in
 * ->read_folio().
 *
 * Standard output has one line per event, for a test to wait on, written
 * before the request is answered:
 *   hang PID         a read of NAME by task PID is being held
 *   interrupted PID  that read was answered EINTR: the kernel interrupted it
 * and with --log, one line per request of these kinds:
 *   getattr PID INO          attributes of INO asked for by task PID
 *   read PID INO OFF SIZE    a read of SIZE bytes at OFF
 *
 * SIGTERM, SIGINT and SIGHUP stop the daemon: held reads fail with EIO, the
 * connection is closed (which ends any request still pending), the mount is
 * detached and the daemon exits 0.  Errors at start: a one-line message on
 * stderr and exit status 1.
 */
#define FUSE_USE_VERSION 314
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <unistd.h>

#define ROOT_INO	FUSE_ROOT_ID
#define MAX_NODES	256	/* names ever looked up */
#define MAX_HELD	64	/* reads of the hanging file held at once */

static int backing_fd = -1;
static const char *hang_name;
static bool log_requests;
static bool sync_read;		/* --sync-read: no FUSE_CAP_ASYNC_READ */

/* Node ids are stable for the daemon's life: ROOT_INO + 1 + index */
static char *node_name[MAX_NODES];
static int nr_nodes;

struct held_read {
	fuse_req_t req;
	pid_t pid;
	bool used;
	bool interrupted;
};

static struct held_read held[MAX_HELD];

static fuse_ino_t node_of(const char *name)
{
	int i;

	for (i = 0; i < nr_nodes; i++)
		if (!strcmp(node_name[i], name))
			return ROOT_INO + 1 + i;
	if (nr_nodes == MAX_NODES)
		return 0;
	node_name[nr_nodes] = strdup(name);
	if (!node_name[nr_nodes])
		return 0;
	return ROOT_INO + 1 + nr_nodes++;
}

static const char *name_of(fuse_ino_t ino)
{
	if (ino <= ROOT_INO || ino - ROOT_INO - 1 >= (fuse_ino_t)nr_nodes)
		return NULL;
	return node_name[ino - ROOT_INO - 1];
}

/* Attributes of @ino as the backing directory has them now; 0 or errno */
static int node_stat(fuse_ino_t ino, struct stat *st)
{
	const char *name = name_of(ino);

	if (ino == ROOT_INO) {
		if (fstat(backing_fd, st))
			return errno;
	} else {
		if (!name)
			return ENOENT;
		if (fstatat(backing_fd, name, st, AT_SYMLINK_NOFOLLOW))
			return errno;
		if (!S_ISREG(st->st_mode))
			return ENOENT;
	}
	st->st_ino = ino;
	st->st_mode &= ~0222;	/* a read-only view */
	return 0;
}

static void bk_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int err;

	memset(&e, 0, sizeof(e));
	if (parent != ROOT_INO || strchr(name, '/')) {
		fuse_reply_err(req, ENOENT);
		return;
	}
	e.ino = node_of(name);
	if (!e.ino) {
		fuse_reply_err(req, ENFILE);
		return;
	}
	err = node_stat(e.ino, &e.attr);
	if (err) {
		fuse_reply_err(req, err);
		return;
	}
	e.generation = 1;
	e.attr_timeout = 0;
	e.entry_timeout = 0;
	fuse_reply_entry(req, &e);
}

static void bk_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	int err = node_stat(ino, &st);

	if (log_requests)
		printf("getattr %d %lu\n", fuse_req_ctx(req)->pid, (unsigned long)ino);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_attr(req, &st, 0);
}

static void bk_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	const char *name = name_of(ino);
	int fd;

	if (!name) {
		fuse_reply_err(req, ino == ROOT_INO ? EISDIR : ENOENT);
		return;
	}
	if ((fi->flags & O_ACCMODE) != O_RDONLY) {
		fuse_reply_err(req, EROFS);
		return;
	}
	fd = openat(backing_fd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		fuse_reply_err(req, errno);
		return;
	}
	fi->fh = fd;
	fi->keep_cache = 0;	/* each open drops the kernel's cached pages */
	fi->direct_io = 0;	/* but pages are cached, so files can be mapped */
	fuse_reply_open(req, fi);
}

static void bk_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	close(fi->fh);
	fuse_reply_err(req, 0);
}

/*
 * Called by libfuse while it handles FUSE_INTERRUPT, or from inside
 * fuse_req_interrupt_func(), with the request's lock held: replying here
 * could free the request under it.  The main loop replies instead.
 */
static void held_interrupted(fuse_req_t req, void *data)
{
	struct held_read *h = data;

	h->interrupted = true;
}

static void hold_read(fuse_req_t req)
{
	int i;

	for (i = 0; i < MAX_HELD && held[i].used; i++)
		;
	if (i == MAX_HELD) {
		fuse_reply_err(req, EIO);
		return;
	}
	held[i] = (struct held_read){ .req = req, .used = true,
				      .pid = fuse_req_ctx(req)->pid };
	printf("hang %d\n", held[i].pid);
	fuse_req_interrupt_func(req, held_interrupted, &held[i]);
}

static void answer_interrupted(void)
{
	int i;

	for (i = 0; i < MAX_HELD; i++) {
		if (!held[i].used || !held[i].interrupted)
			continue;
		held[i].used = false;
		fuse_reply_err(held[i].req, EINTR);
		printf("interrupted %d\n", held[i].pid);
	}
}

static void bk_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	const char *name = name_of(ino);
	char *buf;
	ssize_t n;

	if (log_requests)
		printf("read %d %lu %lld %zu\n", fuse_req_ctx(req)->pid,
		       (unsigned long)ino, (long long)off, size);
	if (hang_name && name && !strcmp(name, hang_name)) {
		hold_read(req);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = pread(fi->fh, buf, size, off);
	if (n < 0)
		fuse_reply_err(req, errno);
	else
		fuse_reply_buf(req, buf, n);
	free(buf);
}

static void bk_init(void *userdata, struct fuse_conn_info *conn)
{
	if (conn->capable & FUSE_CAP_AUTO_INVAL_DATA)
		conn->want |= FUSE_CAP_AUTO_INVAL_DATA;
	/* Reads then wait for the daemon inside ->readahead() too */
	if (sync_read)
		conn->want &= ~FUSE_CAP_ASYNC_READ;
}

static const struct fuse_lowlevel_ops ops = {
	.init		= bk_init,
	.lookup		= bk_lookup,
	.getattr	= bk_getattr,
	.open		= bk_open,
	.read		= bk_read,
	.release	= bk_release,
};

static int bad_usage(void)
{
	fputs("usage: fuse_backing [--log] [--sync-read] [--hang NAME] BACKING_DIR MOUNTPOINT\n",
	      stderr);
	return 1;
}

int main(int argc, char **argv)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_buf buf = { 0 };
	struct fuse_session *se;
	struct pollfd pfd[2];
	sigset_t stop;
	int argi = 1, i, fd;

	for (; argi < argc && argv[argi][0] == '-'; argi++) {
		if (!strcmp(argv[argi], "--log"))
			log_requests = true;
		else if (!strcmp(argv[argi], "--sync-read"))
			sync_read = true;
		else if (!strcmp(argv[argi], "--hang") && argi + 1 < argc)
			hang_name = argv[++argi];
		else
			return bad_usage();
	}
	if (argc - argi != 2)
		return bad_usage();
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

	backing_fd = open(argv[argi], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (backing_fd < 0 || pfd[1].fd < 0) {
		fprintf(stderr, "fuse_backing: %s: %s\n", argv[argi], strerror(errno));
		return 1;
	}
	if (fuse_opt_add_arg(&args, argv[0]) ||
	    fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, "fsname=mmap3-backing,subtype=mmap3-backing"))
		return 1;
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se) {
		fprintf(stderr, "fuse_backing: cannot create a FUSE session\n");
		return 1;
	}
	if (fuse_session_mount(se, argv[argi + 1])) {
		fprintf(stderr, "fuse_backing: cannot mount on %s\n", argv[argi + 1]);
		fuse_session_destroy(se);
		return 1;
	}
	/*
	 * Non-blocking: a request the kernel withdraws (its task was killed
	 * before we read it) must not leave us blocked in read() after poll().
	 */
	fd = fuse_session_fd(se);
	fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
	pfd[0].fd = fd;
	pfd[0].events = POLLIN;

	while (!fuse_session_exited(se)) {
		int res;

		if (poll(pfd, 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			break;
		}
		if (pfd[1].revents)
			break;
		if (!pfd[0].revents)
			continue;
		res = fuse_session_receive_buf(se, &buf);
		if (res == -EINTR || res == -EAGAIN)
			continue;
		if (res <= 0)
			break;
		fuse_session_process_buf(se, &buf);
		answer_interrupted();
	}

	for (i = 0; i < MAX_HELD; i++)
		if (held[i].used)
			fuse_reply_err(held[i].req, EIO);
	free(buf.mem);
	/* Closes the connection first, then detaches the mount */
	fuse_session_unmount(se);
	fuse_session_destroy(se);
	fuse_opt_free_args(&args);
	return 0;
}
