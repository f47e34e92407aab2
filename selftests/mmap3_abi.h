/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The PERF_RECORD_MMAP3 names the mmap3 selftests use, defined from the
 * kernel's own <linux/perf_event.h>.
 *
 * The same sources are also built outside the kernel tree, against a
 * standalone header that defines these names for systems whose headers
 * predate MMAP3; in the tree they come from here, so that the tests check
 * the uapi header itself.
 */
#ifndef MMAP3_ABI_H
#define MMAP3_ABI_H

#include <stddef.h>
#include <linux/perf_event.h>
#include <linux/types.h>

#define PERF_MMAP3_RECORD_TYPE		PERF_RECORD_MMAP3

/* Exists, and reads as the ABI version, when the kernel has MMAP3 */
#define PERF_MMAP3_CAP_PATH		"/proc/sys/kernel/perf_event_mmap3"
#define PERF_MMAP3_ABI_VERSION		2

/* attr.mmap3: the last bit of the flags word that follows read_format */
#define PERF_MMAP3_ATTR_BIT		63
#define PERF_MMAP3_ATTR_FLAGS_OFFSET	40

#define PERF_MMAP3_BUILD_ID_MAX		20

#define perf_mmap3_build_id_status	perf_build_id_status
#define PERF_MMAP3_BUILD_ID_UNAVAILABLE	PERF_BUILD_ID_UNAVAILABLE
#define PERF_MMAP3_BUILD_ID_FOUND	PERF_BUILD_ID_FOUND
#define PERF_MMAP3_BUILD_ID_NO_NOTE	PERF_BUILD_ID_NO_NOTE
#define PERF_MMAP3_BUILD_ID_NOT_ELF	PERF_BUILD_ID_NOT_ELF
#define PERF_MMAP3_BUILD_ID_MALFORMED	PERF_BUILD_ID_MALFORMED
#define PERF_MMAP3_BUILD_ID_IO_ERROR	PERF_BUILD_ID_IO_ERROR
#define PERF_MMAP3_BUILD_ID_NO_FILE	PERF_BUILD_ID_NO_FILE
#define PERF_MMAP3_BUILD_ID_REFUSED	PERF_BUILD_ID_REFUSED
#define PERF_MMAP3_BUILD_ID_STATUS_MAX	PERF_BUILD_ID_REFUSED

/* mmap3_flags: a module's unload (ABI version 2) */
#define PERF_MMAP3_UNLOADED		PERF_RECORD_MMAP3_UNLOADED

/* The record as <linux/perf_event.h> describes it, without sample_id */
struct perf_mmap3_record {
	struct perf_event_header header;
	__u32	pid, tid;
	__u64	addr;
	__u64	len;
	__u64	pgoff;
	__u32	maj;
	__u32	min;
	__u64	ino;
	__u64	ino_generation;
	__u32	prot, flags;
	__u8	build_id_size;
	__u8	build_id_status;
	__u16	mmap3_flags;
	__u8	build_id[PERF_MMAP3_BUILD_ID_MAX];
	char	filename[];
};

#define PERF_MMAP3_RECORD_FIXED_SIZE	96

_Static_assert(sizeof(struct perf_mmap3_record) == PERF_MMAP3_RECORD_FIXED_SIZE,
	       "struct perf_mmap3_record has the size of the record's fixed part");
_Static_assert(offsetof(struct perf_mmap3_record, build_id) == 76,
	       "build_id follows build_id_size, build_id_status and a u16");

static inline void perf_mmap3_attr_set(struct perf_event_attr *attr)
{
	attr->mmap3 = 1;
}

#endif /* MMAP3_ABI_H */
