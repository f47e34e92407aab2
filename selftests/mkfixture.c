// SPDX-License-Identifier: GPL-2.0
/*
 * Writes the ELF fixtures the selftests need on a filesystem other than the
 * guest's tmpfs (the build directory, shared into the guest over 9p):
 *
 *   DIR/cold.elf           build ID in the last page
 *   DIR/coda-v1.elf        two versions of one library, with different
 *   DIR/coda-v2.elf        build IDs: the Coda test's container files
 *   DIR/corpus/NAME        crafted files, one per size, class, note layout
 *                          and malformation
 *   DIR/corpus/MANIFEST    "NAME STATUS [BUILD-ID-HEX]" per file, the status
 *                          as the kernel must report it (enum
 *                          perf_mmap3_build_id_status)
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "mmap3_util.h"

static FILE *manifest;
static char corpus[4096];
static int failed;

static void add_spec(const char *name, struct elf_spec spec)
{
	unsigned char id[64];
	unsigned int len, i, status;
	char path[8192];
	int err;

	snprintf(path, sizeof(path), "%s/%s", corpus, name);
	err = elf_write(path, &spec, true);
	if (err) {
		fprintf(stderr, "%s: %s\n", path, strerror(-err));
		failed = 1;
		return;
	}
	if (spec.damage != ELF_OK || spec.id_len > 20)
		status = PERF_MMAP3_BUILD_ID_MALFORMED;
	else if (!spec.id_len)
		status = PERF_MMAP3_BUILD_ID_NO_NOTE;
	else
		status = PERF_MMAP3_BUILD_ID_FOUND;
	fprintf(manifest, "%s %u", name, status);
	if (status == PERF_MMAP3_BUILD_ID_FOUND) {
		elf_spec_build_id(&spec, id, &len);
		fputc(' ', manifest);
		for (i = 0; i < len; i++)
			fprintf(manifest, "%02x", id[i]);
	}
	fputc('\n', manifest);
}

static void add_raw(const char *name, const void *data, size_t size,
		    unsigned int status)
{
	char path[8192];
	int fd;

	snprintf(path, sizeof(path), "%s/%s", corpus, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0755);
	if (fd < 0 || write(fd, data, size) != (ssize_t)size || close(fd)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		failed = 1;
		return;
	}
	fprintf(manifest, "%s %u\n", name, status);
}

static void write_corpus(void)
{
	static const enum elf_damage damage[] = {
		ELF_HUGE_PHNUM, ELF_NOTE_PAST_EOF, ELF_NAMESZ_OVERFLOW,
		ELF_DESCSZ_OVERFLOW, ELF_OVERSIZE_ID, ELF_TRUNCATED,
	};
	static const unsigned int big[] = { 21, 24, 32, 40, 64 };
	unsigned char junk[8192];
	unsigned int i, c;
	char name[64];

	/* Every build-ID size, ELF64; the common ones in ELF32 too */
	for (i = 1; i <= 20; i++) {
		snprintf(name, sizeof(name), "elf64-id%u", i);
		add_spec(name, (struct elf_spec){ .id_len = i, .id_seed = i });
	}
	for (i = 0; i < 5; i++) {
		static const unsigned int len[] = { 1, 4, 8, 16, 20 };

		snprintf(name, sizeof(name), "elf32-id%u", len[i]);
		add_spec(name, (struct elf_spec){ .elf32 = true,
			 .id_len = len[i], .id_seed = 0x40 + i });
	}
	/* Sizes the kernel must refuse */
	for (c = 0; c < 2; c++)
		for (i = 0; i < 5; i++) {
			snprintf(name, sizeof(name), "elf%s-id%u",
				 c ? "32" : "64", big[i]);
			add_spec(name, (struct elf_spec){ .elf32 = c,
				 .id_len = big[i], .id_seed = 0x50 });
		}
	/* Note layouts */
	for (c = 0; c < 2; c++) {
		const char *cls = c ? "32" : "64";

		snprintf(name, sizeof(name), "elf%s-no-note", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c });
		snprintf(name, sizeof(name), "elf%s-note-page1", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x60, .note_off = 4096 + 0x200 });
		snprintf(name, sizeof(name), "elf%s-note-last-page", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x61, .note_off = 4 * 4096 + 64,
			 .size = 5 * 4096 });
		snprintf(name, sizeof(name), "elf%s-phdrs-at-end", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x62, .phoff = 8192 - 3 * 64 });
		snprintf(name, sizeof(name), "elf%s-phdrs-across-pages", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x63, .phoff = 4096 - 40 });
		snprintf(name, sizeof(name), "elf%s-after-2-notes", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x64, .notes_before = 2 });
		snprintf(name, sizeof(name), "elf%s-after-2-notes-align8", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 20,
			 .id_seed = 0x65, .notes_before = 2, .align8 = true });
		snprintf(name, sizeof(name), "elf%s-second-segment", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .id_len = 16,
			 .id_seed = 0x66, .notes_before = 1,
			 .second_segment = true });
		snprintf(name, sizeof(name), "elf%s-no-note-two-segments", cls);
		add_spec(name, (struct elf_spec){ .elf32 = c, .notes_before = 1,
			 .second_segment = true });
	}
	/* Malformations, in both classes */
	for (c = 0; c < 2; c++)
		for (i = 0; i < ARRAY_SIZE(damage); i++) {
			snprintf(name, sizeof(name), "elf%s-damage%u",
				 c ? "32" : "64", i);
			add_spec(name, (struct elf_spec){ .elf32 = c,
				 .id_len = 20, .damage = damage[i] });
		}
	/* Not ELF, or not a kind of ELF the kernel reads */
	add_raw("empty", "", 0, PERF_MMAP3_BUILD_ID_NOT_ELF);
	add_raw("magic-only", "\177ELF", 4, PERF_MMAP3_BUILD_ID_NOT_ELF);
	add_raw("script", "#!/bin/sh\nexit 0\n", 17, PERF_MMAP3_BUILD_ID_NOT_ELF);
	for (i = 0; i < sizeof(junk); i++)
		junk[i] = (unsigned char)(i * 131 + 7);
	add_raw("junk", junk, sizeof(junk), PERF_MMAP3_BUILD_ID_NOT_ELF);
	memcpy(junk, "\177ELF\003\001\001", 7);	/* class 3 */
	add_raw("bad-class", junk, sizeof(junk), PERF_MMAP3_BUILD_ID_MALFORMED);
	memcpy(junk, "\177ELF\002\002\001", 7);	/* big endian */
	add_raw("big-endian", junk, sizeof(junk), PERF_MMAP3_BUILD_ID_MALFORMED);
	memcpy(junk, "\177ELF\002\001\001", 7);	/* ELF64, junk headers */
	add_raw("junk-headers", junk, 20, PERF_MMAP3_BUILD_ID_MALFORMED);
}

int main(int argc, char **argv)
{
	/* Build ID in the last page: nothing of it is read by accident */
	struct elf_spec cold = { .id_len = 20, .id_seed = 0xe0,
				 .note_off = 3 * 4096 + 64, .size = 4 * 4096 };
	static const struct elf_spec coda[] = {
		{ .id_len = 20, .id_seed = 0x6c },
		{ .id_len = 20, .id_seed = 0x9d },
	};
	char path[4096 + 16];
	unsigned int i;
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

	/* Not on tmpfs: the Coda test's containers must not be shmem files */
	for (i = 0; i < ARRAY_SIZE(coda); i++) {
		snprintf(path, sizeof(path), "%s/coda-v%u.elf", argv[1], i + 1);
		err = elf_write(path, &coda[i], true);
		if (err) {
			fprintf(stderr, "%s: %s\n", path, strerror(-err));
			return 1;
		}
	}

	snprintf(corpus, sizeof(corpus), "%s/corpus", argv[1]);
	if (mkdir(corpus, 0755) && errno != EEXIST) {
		fprintf(stderr, "%s: %s\n", corpus, strerror(errno));
		return 1;
	}
	snprintf(path, sizeof(path), "%s/MANIFEST", corpus);
	manifest = fopen(path, "w");
	if (!manifest) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	write_corpus();
	if (fclose(manifest)) {
		fprintf(stderr, "%s: %s\n", path, strerror(errno));
		return 1;
	}
	return failed;
}
