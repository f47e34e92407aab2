// SPDX-License-Identifier: GPL-2.0
/*
 * Writes the ELF fixtures the selftests need on a filesystem other than the
 * guest's tmpfs (the build directory, shared into the guest over 9p).
 */
#include <stdio.h>
#include <string.h>
#include "mmap3_util.h"

int main(int argc, char **argv)
{
	/* Build ID in the last page: nothing of it is read by accident */
	struct elf_spec cold = { .id_len = 20, .id_seed = 0xe0,
				 .note_off = 3 * 4096 + 64, .size = 4 * 4096 };
	char path[4096];
	int err;

	if (argc != 2) {
		fprintf(stderr, "usage: %s DIR\n", argv[0]);
		return 2;
	}
	snprintf(path, sizeof(path), "%s/cold.elf", argv[1]);
	err = elf_write(path, &cold, true);
	if (err) {
		fprintf(stderr, "%s: %s\n", path, strerror(-err));
		return 1;
	}
	return 0;
}
