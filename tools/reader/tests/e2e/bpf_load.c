/* e2e test program: loads BPF socket filters one after another at the same
 * spot and runs each hot.
 *
 *   bpf_load OBJ MS [OBJ MS ...]
 *   bpf_load --gone ID
 *
 * For each OBJ (an object file with one socket filter program), in turn:
 * loads it, attaches it to the receiving end of a Unix datagram socket
 * pair (the same socket each time), prints "loaded <name> id <id> tag
 * <tag>", sends packets through it (the filter runs in this thread, in the
 * kernel) until the thread has used MS milliseconds of CPU time and sent a
 * floor of packets (budget.h), detaches
 * and unloads it, and prints "unloaded <name>".  Exits 2 if a program
 * cannot be loaded (the message says why).
 *
 * With --gone, waits until the program with that id no longer exists (a
 * socket filter is freed after an RCU grace period, not when it is
 * detached); at most 300 s, then exits 3. */
#include <bpf/bpf.h>
#include <bpf/libbpf.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "budget.h"

#ifndef SO_ATTACH_BPF
#define SO_ATTACH_BPF 50
#endif
#ifndef SO_DETACH_BPF
#define SO_DETACH_BPF 27
#endif

static int wait_gone(unsigned int id)
{
	time_t give_up = time(NULL) + 300;
	int fd;

	while ((fd = bpf_prog_get_fd_by_id(id)) >= 0 || errno != ENOENT) {
		if (fd >= 0)
			close(fd);
		if (time(NULL) > give_up) {
			fprintf(stderr, "bpf_load: program %u still exists\n", id);
			return 3;
		}
		usleep(10000);
	}
	return 0;
}

int main(int argc, char **argv)
{
	char buf[64] = { 0 };
	int sv[2], i;

	if (argc == 3 && !strcmp(argv[1], "--gone"))
		return wait_gone(strtoul(argv[2], NULL, 10));

	if (argc < 3 || argc % 2 != 1) {
		fprintf(stderr, "usage: bpf_load OBJ MS [OBJ MS ...]\n");
		return 1;
	}
	if (socketpair(AF_UNIX, SOCK_DGRAM, 0, sv) != 0) {
		perror("socketpair");
		return 1;
	}
	for (i = 1; i + 1 < argc; i += 2) {
		struct bpf_object *obj = bpf_object__open_file(argv[i], NULL);
		struct bpf_program *prog;
		struct bpf_prog_info info;
		__u32 len = sizeof(info);
		struct budget b;
		int fd, err, k;

		if (!obj) {
			fprintf(stderr, "bpf_load: %s: %s\n", argv[i], strerror(errno));
			return 2;
		}
		err = bpf_object__load(obj);
		if (err) {
			fprintf(stderr, "bpf_load: loading %s: %s\n", argv[i], strerror(-err));
			return 2;
		}
		prog = bpf_object__next_program(obj, NULL);
		fd = bpf_program__fd(prog);
		memset(&info, 0, sizeof(info));
		if (bpf_obj_get_info_by_fd(fd, &info, &len) != 0) {
			perror("bpf_obj_get_info_by_fd");
			return 1;
		}
		if (setsockopt(sv[1], SOL_SOCKET, SO_ATTACH_BPF, &fd, sizeof(fd)) != 0) {
			perror("SO_ATTACH_BPF");
			return 2;
		}
		printf("loaded %s id %u tag ", bpf_program__name(prog), info.id);
		for (k = 0; k < 8; k++)
			printf("%02x", info.tag[k]);
		printf("\n");
		fflush(stdout);
		budget_start(&b, bpf_program__name(prog), CLOCK_THREAD_CPUTIME_ID,
			     atof(argv[i + 1]), 10);
		while (budget_more(&b)) {
			if (send(sv[0], buf, sizeof(buf), 0) < 0 ||
			    recv(sv[1], buf, sizeof(buf), 0) < 0) {
				perror("send/recv");
				return 1;
			}
		}
		if (setsockopt(sv[1], SOL_SOCKET, SO_DETACH_BPF, &fd, sizeof(fd)) != 0) {
			perror("SO_DETACH_BPF");
			return 1;
		}
		printf("unloaded %s\n", bpf_program__name(prog));
		fflush(stdout);
		bpf_object__close(obj);
	}
	return 0;
}
