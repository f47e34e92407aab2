// SPDX-License-Identifier: GPL-2.0
/*
 * KUnit tests of the ELF build-id parser behind PERF_RECORD_MMAP3.
 *
 * build_id_parse_image() and build_id_parse_file() share one parser; this
 * suite feeds it images built in memory, valid ones and hostile ones, which
 * would be awkward to get past a filesystem or a loader.  The selftests cover
 * the file path end to end.
 */

#include <kunit/test.h>
#include <linux/buildid.h>
#include <linux/elf.h>
#include <linux/prandom.h>
#include <linux/slab.h>
#include <linux/string.h>

#ifdef __LITTLE_ENDIAN
#define TEST_ELFDATA ELFDATA2LSB
#define TEST_ELFDATA_FOREIGN ELFDATA2MSB
#else
#define TEST_ELFDATA ELFDATA2MSB
#define TEST_ELFDATA_FOREIGN ELFDATA2LSB
#endif

/* The ELF note type of a GNU build ID */
#define NT_GNU_BUILD_ID_TYPE	3

#define IMG_SIZE	4096
#define NOTE_OFF	0x200

struct elf_img {
	u8 *buf;
	size_t size;
	bool is64;
};

static size_t ehdr_size(const struct elf_img *img)
{
	return img->is64 ? sizeof(struct elf64_hdr) : sizeof(struct elf32_hdr);
}

static size_t phdr_size(const struct elf_img *img)
{
	return img->is64 ? sizeof(struct elf64_phdr) : sizeof(struct elf32_phdr);
}

static void img_set_phdrs(struct elf_img *img, u64 phoff, u16 phnum)
{
	if (img->is64) {
		struct elf64_hdr *e = (struct elf64_hdr *)img->buf;

		e->e_phoff = phoff;
		e->e_phnum = phnum;
	} else {
		struct elf32_hdr *e = (struct elf32_hdr *)img->buf;

		e->e_phoff = phoff;
		e->e_phnum = phnum;
	}
}

static u64 img_phoff(const struct elf_img *img)
{
	return img->is64 ? ((struct elf64_hdr *)img->buf)->e_phoff :
			   ((struct elf32_hdr *)img->buf)->e_phoff;
}

static void img_set_phdr(struct elf_img *img, int idx, u32 type, u64 off,
			 u64 filesz, u64 align)
{
	u8 *p = img->buf + img_phoff(img) + idx * phdr_size(img);

	if (img->is64) {
		struct elf64_phdr *ph = (struct elf64_phdr *)p;

		ph->p_type = type;
		ph->p_offset = off;
		ph->p_filesz = filesz;
		ph->p_align = align;
	} else {
		struct elf32_phdr *ph = (struct elf32_phdr *)p;

		ph->p_type = type;
		ph->p_offset = off;
		ph->p_filesz = filesz;
		ph->p_align = align;
	}
}

/* Write a note at @off; returns the offset just past it. */
static u64 img_put_note(struct elf_img *img, u64 off, u32 namesz, u32 descsz,
			u32 type, const char *name, u32 align)
{
	struct elf32_note *n = (struct elf32_note *)(img->buf + off);
	u64 desc = off + ALIGN(sizeof(*n) + namesz, align);
	u32 i;

	n->n_namesz = namesz;
	n->n_descsz = descsz;
	n->n_type = type;
	if (name)
		memcpy(n + 1, name, namesz);
	for (i = 0; i < descsz && desc + i < img->size; i++)
		img->buf[desc + i] = 0xa0 + i;
	return desc + ALIGN(descsz, align);
}

static struct elf_img *img_new(struct kunit *test, bool is64, size_t size)
{
	struct elf_img *img = kunit_kzalloc(test, sizeof(*img), GFP_KERNEL);
	u8 *ident;

	KUNIT_ASSERT_NOT_NULL(test, img);
	img->buf = kunit_kzalloc(test, size, GFP_KERNEL);
	KUNIT_ASSERT_NOT_NULL(test, img->buf);
	img->size = size;
	img->is64 = is64;

	ident = img->buf;
	memcpy(ident, ELFMAG, SELFMAG);
	ident[EI_CLASS] = is64 ? ELFCLASS64 : ELFCLASS32;
	ident[EI_DATA] = TEST_ELFDATA;
	ident[EI_VERSION] = EV_CURRENT;
	if (is64) {
		struct elf64_hdr *e = (struct elf64_hdr *)img->buf;

		e->e_type = ET_DYN;
		e->e_ehsize = sizeof(*e);
		e->e_phentsize = sizeof(struct elf64_phdr);
	} else {
		struct elf32_hdr *e = (struct elf32_hdr *)img->buf;

		e->e_type = ET_DYN;
		e->e_ehsize = sizeof(*e);
		e->e_phentsize = sizeof(struct elf32_phdr);
	}
	return img;
}

/*
 * The common layout: program headers after the ELF header, a PT_LOAD and a
 * PT_NOTE at NOTE_OFF holding one GNU build-id note of @len bytes.
 */
static struct elf_img *img_standard(struct kunit *test, bool is64, u32 len)
{
	struct elf_img *img = img_new(test, is64, IMG_SIZE);
	u64 end;

	img_set_phdrs(img, ehdr_size(img), 2);
	img_set_phdr(img, 0, PT_LOAD, 0, IMG_SIZE, 0x1000);
	end = img_put_note(img, NOTE_OFF, 4, len, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 1, PT_NOTE, NOTE_OFF, end - NOTE_OFF, 4);
	return img;
}

static struct build_id parse(const struct elf_img *img)
{
	struct build_id id;

	build_id_parse_image(img->buf, img->size, &id);
	return id;
}

static void expect_found(struct kunit *test, const struct elf_img *img, u32 len)
{
	struct build_id id = parse(img);
	u32 i;

	KUNIT_ASSERT_EQ(test, id.status, BUILD_ID_FOUND);
	KUNIT_EXPECT_EQ(test, id.size, len);
	for (i = 0; i < BUILD_ID_SIZE_MAX; i++)
		KUNIT_EXPECT_EQ(test, id.data[i], i < len ? 0xa0 + i : 0);
}

static void expect_status(struct kunit *test, const struct elf_img *img,
			  enum build_id_status status)
{
	struct build_id id = parse(img);
	u32 i;

	KUNIT_EXPECT_EQ(test, id.status, status);
	KUNIT_EXPECT_EQ(test, id.size, 0);
	for (i = 0; i < BUILD_ID_SIZE_MAX; i++)
		KUNIT_EXPECT_EQ(test, id.data[i], 0);
}

static void elf64_sha1_build_id_found(struct kunit *test)
{
	expect_found(test, img_standard(test, true, 20), 20);
}

static void elf64_md5_build_id_found(struct kunit *test)
{
	expect_found(test, img_standard(test, true, 16), 16);
}

static void elf64_xxhash_build_id_found(struct kunit *test)
{
	expect_found(test, img_standard(test, true, 8), 8);
}

static void elf32_build_id_found(struct kunit *test)
{
	expect_found(test, img_standard(test, false, 20), 20);
	expect_found(test, img_standard(test, false, 16), 16);
}

static void one_byte_build_id_found(struct kunit *test)
{
	expect_found(test, img_standard(test, true, 1), 1);
}

static void note_beyond_first_page_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 4 * PAGE_SIZE);
	u64 off = 3 * PAGE_SIZE + 0x40, end;

	img_set_phdrs(img, ehdr_size(img), 1);
	end = img_put_note(img, off, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 0, PT_NOTE, off, end - off, 4);
	expect_found(test, img, 20);
}

static void phdrs_at_end_of_file_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 2 * PAGE_SIZE);
	u64 phoff = img->size - 3 * sizeof(struct elf64_phdr), end;

	img_set_phdrs(img, phoff, 3);
	img_set_phdr(img, 0, PT_LOAD, 0, img->size, 0x1000);
	img_set_phdr(img, 1, PT_GNU_STACK, 0, 0, 16);
	end = img_put_note(img, NOTE_OFF, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 2, PT_NOTE, NOTE_OFF, end - NOTE_OFF, 4);
	expect_found(test, img, 20);
}

static void phdrs_straddling_page_boundary_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 3 * PAGE_SIZE);
	u64 phoff = PAGE_SIZE - sizeof(struct elf64_phdr) / 2, end;

	img_set_phdrs(img, phoff, 2);
	img_set_phdr(img, 0, PT_LOAD, 0, img->size, 0x1000);
	end = img_put_note(img, 2 * PAGE_SIZE - 8, 4, 20, NT_GNU_BUILD_ID_TYPE,
			   "GNU", 4);
	img_set_phdr(img, 1, PT_NOTE, 2 * PAGE_SIZE - 8, end - (2 * PAGE_SIZE - 8), 4);
	expect_found(test, img, 20);
}

static void build_id_after_other_notes_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 off;

	img_set_phdrs(img, ehdr_size(img), 1);
	/* NT_GNU_ABI_TAG, then a vendor note of type 3, then the build ID */
	off = img_put_note(img, NOTE_OFF, 4, 16, 1, "GNU", 4);
	off = img_put_note(img, off, 7, 20, NT_GNU_BUILD_ID_TYPE, "Vendor", 4);
	off = img_put_note(img, off, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 0, PT_NOTE, NOTE_OFF, off - NOTE_OFF, 4);
	expect_found(test, img, 20);
}

static void build_id_in_second_pt_note_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 end1, end2;

	img_set_phdrs(img, ehdr_size(img), 2);
	/* .note.gnu.property: 8-byte aligned segment, 16-byte descriptor */
	end1 = img_put_note(img, NOTE_OFF, 4, 16, 5, "GNU", 8);
	img_set_phdr(img, 0, PT_NOTE, NOTE_OFF, end1 - NOTE_OFF, 8);
	end2 = img_put_note(img, 0x400, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 1, PT_NOTE, 0x400, end2 - 0x400, 4);
	expect_found(test, img, 20);
}

static void eight_byte_aligned_notes_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 off;

	img_set_phdrs(img, ehdr_size(img), 1);
	off = img_put_note(img, NOTE_OFF, 4, 12, 5, "GNU", 8);
	off = img_put_note(img, off, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 8);
	img_set_phdr(img, 0, PT_NOTE, NOTE_OFF, off - NOTE_OFF, 8);
	expect_found(test, img, 20);
}

static void malformed_segment_then_valid_one_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 end;

	img_set_phdrs(img, ehdr_size(img), 2);
	img_set_phdr(img, 0, PT_NOTE, IMG_SIZE - 4, 64, 4);
	end = img_put_note(img, NOTE_OFF, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 1, PT_NOTE, NOTE_OFF, end - NOTE_OFF, 4);
	expect_found(test, img, 20);
}

static void elf_without_build_id_no_note(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 end;

	img_set_phdrs(img, ehdr_size(img), 2);
	img_set_phdr(img, 0, PT_LOAD, 0, IMG_SIZE, 0x1000);
	end = img_put_note(img, NOTE_OFF, 4, 16, 1, "GNU", 4);
	img_set_phdr(img, 1, PT_NOTE, NOTE_OFF, end - NOTE_OFF, 4);
	expect_status(test, img, BUILD_ID_NO_NOTE);
}

static void elf_without_program_headers_no_note(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);

	expect_status(test, img, BUILD_ID_NO_NOTE);
}

static void type_3_note_of_other_owner_no_note(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	u64 end;

	img_set_phdrs(img, ehdr_size(img), 1);
	end = img_put_note(img, NOTE_OFF, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNX", 4);
	img_set_phdr(img, 0, PT_NOTE, NOTE_OFF, end - NOTE_OFF, 4);
	expect_status(test, img, BUILD_ID_NO_NOTE);
}

static void not_elf(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	static const char script[] = "#!/bin/sh\necho hello\n";

	memset(img->buf, 0, IMG_SIZE);
	memcpy(img->buf, script, sizeof(script));
	expect_status(test, img, BUILD_ID_NOT_ELF);

	/* Shorter than e_ident */
	img->size = 3;
	expect_status(test, img, BUILD_ID_NOT_ELF);
	img->size = 0;
	expect_status(test, img, BUILD_ID_NOT_ELF);
}

static void truncated_elf_header_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	img->size = sizeof(struct elf64_hdr) - 1;
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void bad_class_or_byte_order_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	img->buf[EI_CLASS] = 3;
	expect_status(test, img, BUILD_ID_MALFORMED);

	img = img_standard(test, true, 20);
	img->buf[EI_DATA] = TEST_ELFDATA_FOREIGN;
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void huge_phnum_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	img_set_phdrs(img, ehdr_size(img), 0xffff);
	expect_status(test, img, BUILD_ID_MALFORMED);

	/* Within the 64KiB limit but past the end of the image */
	img = img_standard(test, true, 20);
	img_set_phdrs(img, ehdr_size(img), 1000);
	expect_status(test, img, BUILD_ID_MALFORMED);
}

/*
 * Program headers past the 64KiB the parser reads, but inside the image:
 * the file may be valid (binfmt_elf would not load it, other loaders may),
 * so the answer is "not read", never "malformed".
 */
static void phdrs_beyond_limit_unavailable(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 192 * 1024);

	img_set_phdrs(img, ehdr_size(img), 2000);
	expect_status(test, img, BUILD_ID_UNAVAILABLE);
}

static void phoff_overflow_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	img_set_phdrs(img, U64_MAX - 8, 2);
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void wrong_phentsize_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	((struct elf64_hdr *)img->buf)->e_phentsize = sizeof(struct elf32_phdr);
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void note_offset_past_eof_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);

	img_set_phdr(img, 1, PT_NOTE, IMG_SIZE + 0x1000, 36, 4);
	expect_status(test, img, BUILD_ID_MALFORMED);

	img = img_standard(test, true, 20);
	img_set_phdr(img, 1, PT_NOTE, NOTE_OFF, U64_MAX - NOTE_OFF + 1, 4);
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void namesz_overflow_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);
	struct elf32_note *n = (struct elf32_note *)(img->buf + NOTE_OFF);

	n->n_namesz = U32_MAX;
	expect_status(test, img, BUILD_ID_MALFORMED);

	n->n_namesz = U32_MAX - 2;
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void descsz_overflow_malformed(struct kunit *test)
{
	struct elf_img *img = img_standard(test, true, 20);
	struct elf32_note *n = (struct elf32_note *)(img->buf + NOTE_OFF);

	n->n_descsz = U32_MAX;
	expect_status(test, img, BUILD_ID_MALFORMED);
}

static void oversize_build_id_malformed(struct kunit *test)
{
	expect_status(test, img_standard(test, true, 21), BUILD_ID_MALFORMED);
	expect_status(test, img_standard(test, true, 64), BUILD_ID_MALFORMED);
}

static void empty_build_id_malformed(struct kunit *test)
{
	expect_status(test, img_standard(test, true, 0), BUILD_ID_MALFORMED);
}

static void endless_notes_bounded(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 64 * 1024);
	u64 off = NOTE_OFF;

	/*
	 * Thousands of empty notes before the build ID: bounded, not walked,
	 * and the file, which is valid, is not called malformed for it.
	 */
	img_set_phdrs(img, ehdr_size(img), 1);
	while (off + 64 < img->size)
		off = img_put_note(img, off, 0, 0, 0, NULL, 4);
	off = img_put_note(img, off, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	img_set_phdr(img, 0, PT_NOTE, NOTE_OFF, off - NOTE_OFF, 4);
	expect_status(test, img, BUILD_ID_UNAVAILABLE);
}

/*
 * Random corruption of a valid image must never crash or read out of
 * bounds (KASAN would catch the latter), and every result must be
 * self-consistent.
 */
static void random_corruption_is_safe(struct kunit *test)
{
	struct elf_img *good = img_standard(test, true, 20);
	struct elf_img *img = img_new(test, true, IMG_SIZE);
	struct rnd_state rnd;
	unsigned int i, j, found = 0;

	prandom_seed_state(&rnd, 0x6d6d617033ULL);
	for (i = 0; i < 20000; i++) {
		struct build_id id;

		memcpy(img->buf, good->buf, IMG_SIZE);
		for (j = 0; j < 1 + prandom_u32_state(&rnd) % 4; j++) {
			u32 pos = prandom_u32_state(&rnd) % (NOTE_OFF + 48);

			img->buf[pos] = prandom_u32_state(&rnd);
		}
		img->size = IMG_SIZE - prandom_u32_state(&rnd) % 64;

		build_id_parse_image(img->buf, img->size, &id);
		/* Only outcomes of the contents: memory cannot fail to read */
		KUNIT_ASSERT_TRUE(test, build_id_status_is_content(id.status));
		if (id.status == BUILD_ID_FOUND) {
			found++;
			KUNIT_ASSERT_GE(test, id.size, 1);
			KUNIT_ASSERT_LE(test, id.size, BUILD_ID_SIZE_MAX);
		} else {
			KUNIT_ASSERT_EQ(test, id.size, 0);
		}
	}
	/* Most single-byte corruptions miss the fields that matter. */
	KUNIT_EXPECT_GT(test, found, 0U);
}

/*
 * build_id_parse_notes(): a section of notes as a module has it, reached
 * through its section header rather than a PT_NOTE.
 */
static void notes_section_found(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 256);
	struct build_id id = { .status = BUILD_ID_NO_NOTE };
	u64 end;

	end = img_put_note(img, 0, 6, 4, 1, "Linux", 4);
	end = img_put_note(img, end, 4, 16, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	KUNIT_ASSERT_TRUE(test, build_id_parse_notes(img->buf, end, &id));
	KUNIT_EXPECT_EQ(test, id.status, BUILD_ID_FOUND);
	KUNIT_EXPECT_EQ(test, id.size, 16);
	KUNIT_EXPECT_EQ(test, id.data[0], 0xa0);
	KUNIT_EXPECT_EQ(test, id.data[15], 0xaf);
	KUNIT_EXPECT_EQ(test, id.data[16], 0);
}

static void notes_section_without_build_id_left_alone(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 256);
	struct build_id id = { .status = BUILD_ID_NO_NOTE };
	u64 end;

	end = img_put_note(img, 0, 6, 4, 1, "Linux", 4);
	end = img_put_note(img, end, 4, 16, NT_GNU_BUILD_ID_TYPE, "GNX", 4);
	KUNIT_EXPECT_FALSE(test, build_id_parse_notes(img->buf, end, &id));
	KUNIT_EXPECT_EQ(test, id.status, BUILD_ID_NO_NOTE);
	KUNIT_EXPECT_EQ(test, id.size, 0);
}

static void notes_section_cut_short_not_read(struct kunit *test)
{
	struct elf_img *img = img_new(test, true, 256);
	struct build_id id = { .status = BUILD_ID_NO_NOTE };
	u64 end;

	/* The section ends inside the build ID: nothing past it is read. */
	end = img_put_note(img, 0, 4, 20, NT_GNU_BUILD_ID_TYPE, "GNU", 4);
	KUNIT_EXPECT_FALSE(test, build_id_parse_notes(img->buf, end - 4, &id));
	KUNIT_EXPECT_EQ(test, id.status, BUILD_ID_NO_NOTE);
}

static struct kunit_case buildid_test_cases[] = {
	KUNIT_CASE(elf64_sha1_build_id_found),
	KUNIT_CASE(elf64_md5_build_id_found),
	KUNIT_CASE(elf64_xxhash_build_id_found),
	KUNIT_CASE(elf32_build_id_found),
	KUNIT_CASE(one_byte_build_id_found),
	KUNIT_CASE(note_beyond_first_page_found),
	KUNIT_CASE(phdrs_at_end_of_file_found),
	KUNIT_CASE(phdrs_straddling_page_boundary_found),
	KUNIT_CASE(build_id_after_other_notes_found),
	KUNIT_CASE(build_id_in_second_pt_note_found),
	KUNIT_CASE(eight_byte_aligned_notes_found),
	KUNIT_CASE(malformed_segment_then_valid_one_found),
	KUNIT_CASE(elf_without_build_id_no_note),
	KUNIT_CASE(elf_without_program_headers_no_note),
	KUNIT_CASE(type_3_note_of_other_owner_no_note),
	KUNIT_CASE(not_elf),
	KUNIT_CASE(truncated_elf_header_malformed),
	KUNIT_CASE(bad_class_or_byte_order_malformed),
	KUNIT_CASE(huge_phnum_malformed),
	KUNIT_CASE(phdrs_beyond_limit_unavailable),
	KUNIT_CASE(phoff_overflow_malformed),
	KUNIT_CASE(wrong_phentsize_malformed),
	KUNIT_CASE(note_offset_past_eof_malformed),
	KUNIT_CASE(namesz_overflow_malformed),
	KUNIT_CASE(descsz_overflow_malformed),
	KUNIT_CASE(oversize_build_id_malformed),
	KUNIT_CASE(empty_build_id_malformed),
	KUNIT_CASE(endless_notes_bounded),
	KUNIT_CASE(random_corruption_is_safe),
	KUNIT_CASE(notes_section_found),
	KUNIT_CASE(notes_section_without_build_id_left_alone),
	KUNIT_CASE(notes_section_cut_short_not_read),
	{}
};

static struct kunit_suite buildid_test_suite = {
	.name = "buildid",
	.test_cases = buildid_test_cases,
};

kunit_test_suite(buildid_test_suite);
