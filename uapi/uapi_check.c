// SPDX-License-Identifier: GPL-2.0
/*
 * Proves that uapi/linux/perf_event_mmap3.h agrees with what the kernel
 * series adds to include/uapi/linux/perf_event.h.  Compiled against the
 * patched kernel's exported headers (make headers) and run at build time.
 */
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <linux/perf_event.h>		/* the patched kernel's */
#include <linux/perf_event_mmap3.h>	/* ours */

#define SAME(a, b) _Static_assert((long)(a) == (long)(b), #a " != " #b)

SAME(PERF_RECORD_MMAP3, PERF_MMAP3_RECORD_TYPE);
SAME(PERF_BUILD_ID_FOUND, PERF_MMAP3_BUILD_ID_FOUND);
SAME(PERF_BUILD_ID_NO_NOTE, PERF_MMAP3_BUILD_ID_NO_NOTE);
SAME(PERF_BUILD_ID_NOT_ELF, PERF_MMAP3_BUILD_ID_NOT_ELF);
SAME(PERF_BUILD_ID_MALFORMED, PERF_MMAP3_BUILD_ID_MALFORMED);
SAME(PERF_BUILD_ID_IO_ERROR, PERF_MMAP3_BUILD_ID_IO_ERROR);
SAME(PERF_BUILD_ID_NO_FILE, PERF_MMAP3_BUILD_ID_NO_FILE);
SAME(PERF_BUILD_ID_REFUSED, PERF_MMAP3_BUILD_ID_REFUSED);
SAME(PERF_BUILD_ID_UNAVAILABLE, PERF_MMAP3_BUILD_ID_UNAVAILABLE);
SAME(offsetof(struct perf_event_attr, read_format) + 8,
     PERF_MMAP3_ATTR_FLAGS_OFFSET);
SAME(offsetof(struct perf_mmap3_record, filename), PERF_MMAP3_RECORD_FIXED_SIZE);
SAME(offsetof(struct perf_mmap3_record, prot), 64);
SAME(offsetof(struct perf_mmap3_record, build_id_size), 72);
SAME(offsetof(struct perf_mmap3_record, build_id), 76);
SAME(offsetof(struct perf_mmap3_record, mmap3_flags), 74);
SAME(PERF_RECORD_MMAP3_UNLOADED, PERF_MMAP3_UNLOADED);

int main(void)
{
	struct perf_event_attr kernel, ours;

	/* The bitfield the kernel declares is the bit our helper sets */
	memset(&kernel, 0, sizeof(kernel));
	memset(&ours, 0, sizeof(ours));
	kernel.mmap3 = 1;
	perf_mmap3_attr_set(&ours);
	if (memcmp(&kernel, &ours, sizeof(kernel))) {
		fprintf(stderr, "uapi-check: perf_mmap3_attr_set() does not set attr.mmap3\n");
		return 1;
	}
	/* ... and nothing the kernel knows by another name */
	kernel.mmap3 = 0;
	if (memcmp(&kernel, &(struct perf_event_attr){ 0 }, sizeof(kernel)))
		return 1;
	/* test and clear read and drop the same bit, and only it */
	memset(&ours, 0xff, sizeof(ours));
	ours.mmap3 = 0;
	if (perf_mmap3_attr_test(&ours)) {
		fprintf(stderr, "uapi-check: perf_mmap3_attr_test() sees a bit that is not attr.mmap3\n");
		return 1;
	}
	ours.mmap3 = 1;
	if (!perf_mmap3_attr_test(&ours)) {
		fprintf(stderr, "uapi-check: perf_mmap3_attr_test() misses attr.mmap3\n");
		return 1;
	}
	memset(&kernel, 0xff, sizeof(kernel));
	kernel.mmap3 = 0;
	perf_mmap3_attr_clear(&ours);
	if (memcmp(&kernel, &ours, sizeof(kernel))) {
		fprintf(stderr, "uapi-check: perf_mmap3_attr_clear() does not clear just attr.mmap3\n");
		return 1;
	}
	printf("uapi-check: uapi/linux/perf_event_mmap3.h matches the kernel's perf_event.h\n");
	return 0;
}
