/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * PERF_RECORD_MMAP3: userspace view of the mmap3 perf ABI.
 *
 * This header compiles on any Linux system, including ones whose
 * <linux/perf_event.h> predates mmap3: every name here carries a PERF_MMAP3_
 * prefix so it never collides with the kernel's own definitions, and
 * tests/uapi_check.c proves at build time that the values agree with what the
 * kernel series adds to include/uapi/linux/perf_event.h.
 *
 * Never set the attr bit on a kernel that does not advertise mmap3: read
 * PERF_MMAP3_CAP_PATH first.  On a kernel without mmap3 the bit is a reserved
 * bit and perf_event_open() fails with EINVAL; newer upstream kernels assign
 * other meanings to low reserved bits and record types, which is why mmap3
 * uses the highest ones.
 */
#ifndef _UAPI_LINUX_PERF_EVENT_MMAP3_H
#define _UAPI_LINUX_PERF_EVENT_MMAP3_H

#include <linux/types.h>
#include <linux/perf_event.h>

/* Record type of PERF_RECORD_MMAP3 (enum perf_event_type). */
#define PERF_MMAP3_RECORD_TYPE		63

/*
 * perf_event_attr.mmap3 is bit 63 of the flags word that follows read_format
 * (the word holding disabled, inherit, ..., sigtrap).  Use
 * perf_mmap3_attr_set() when <linux/perf_event.h> has no mmap3 field.
 */
#define PERF_MMAP3_ATTR_BIT		63
#define PERF_MMAP3_ATTR_FLAGS_OFFSET	40

/*
 * Capability file.  Present only on kernels with mmap3; it reads as the ABI
 * version, currently PERF_MMAP3_ABI_VERSION.  Version 1: mappings.  Version
 * 2 adds module loads and unloads (see PERF_MMAP3_UNLOADED); the record's
 * layout is the same.
 */
#define PERF_MMAP3_CAP_PATH		"/proc/sys/kernel/perf_event_mmap3"
#define PERF_MMAP3_ABI_VERSION		2

/* Largest build-id the record carries; shorter ones are zero padded. */
#define PERF_MMAP3_BUILD_ID_MAX		20

/*
 * perf_mmap3_record.build_id_status.  Zero is not success: a zeroed record
 * never claims a build ID was found.
 */
enum perf_mmap3_build_id_status {
	PERF_MMAP3_BUILD_ID_UNAVAILABLE	= 0, /* not captured at map time */
	PERF_MMAP3_BUILD_ID_FOUND	= 1, /* build_id[0..size) is valid */
	PERF_MMAP3_BUILD_ID_NO_NOTE	= 2, /* ELF without NT_GNU_BUILD_ID */
	PERF_MMAP3_BUILD_ID_NOT_ELF	= 3, /* file is not an ELF image */
	PERF_MMAP3_BUILD_ID_MALFORMED	= 4, /* ELF headers or notes invalid */
	PERF_MMAP3_BUILD_ID_IO_ERROR	= 5, /* reading the file failed */
	PERF_MMAP3_BUILD_ID_NO_FILE	= 6, /* anonymous or special mapping */
	PERF_MMAP3_BUILD_ID_REFUSED	= 7, /* not a regular file, secretmem */
};

/* The largest status this header knows; newer kernels may add more. */
#define PERF_MMAP3_BUILD_ID_STATUS_MAX	PERF_MMAP3_BUILD_ID_REFUSED

/*
 * perf_mmap3_record.mmap3_flags (ABI version 2; zero in version 1).  A
 * module's load and unload (pid and tid -1, misc PERF_RECORD_MISC_KERNEL,
 * "[name]", no inode, the module's core text, the build ID of its notes)
 * go to mmap3 events that do not exclude the kernel; the unload carries
 * this flag: from then on nothing is known to be at that range.
 */
#define PERF_MMAP3_UNLOADED		(1 << 0)

/*
 * Layout of a PERF_RECORD_MMAP3 record.  Everything PERF_RECORD_MMAP2 carries
 * without the build-id union, then the build-id with its size and status.
 * The filename is NUL terminated and padded to 8 bytes; struct sample_id
 * follows it when attr.sample_id_all is set.
 */
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

/*
 * attr.mmap3 is a bitfield in the kernel's struct perf_event_attr; these
 * helpers reach it through the flags word for programs built against
 * headers that predate it.
 */
static inline __u64 *__perf_mmap3_attr_flags(struct perf_event_attr *attr)
{
	return (__u64 *)((char *)attr + PERF_MMAP3_ATTR_FLAGS_OFFSET);
}

static inline __u64 __perf_mmap3_attr_mask(void)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
	/* Big-endian bitfields are allocated from the most significant bit. */
	return 1ULL << (63 - PERF_MMAP3_ATTR_BIT);
#else
	return 1ULL << PERF_MMAP3_ATTR_BIT;
#endif
}

static inline void perf_mmap3_attr_set(struct perf_event_attr *attr)
{
	*__perf_mmap3_attr_flags(attr) |= __perf_mmap3_attr_mask();
}

static inline void perf_mmap3_attr_clear(struct perf_event_attr *attr)
{
	*__perf_mmap3_attr_flags(attr) &= ~__perf_mmap3_attr_mask();
}

static inline int perf_mmap3_attr_test(const struct perf_event_attr *attr)
{
	return !!(*__perf_mmap3_attr_flags((struct perf_event_attr *)attr) &
		  __perf_mmap3_attr_mask());
}

#endif /* _UAPI_LINUX_PERF_EVENT_MMAP3_H */
