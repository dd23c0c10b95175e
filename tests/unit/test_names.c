/*
 * test_names.c - the pure name and size functions of meta/: ranks,
 * namespaces, page file names and the SIZE syntax of the command line.
 *
 * These decide what mkdir, create and every size option accept, so the
 * edge cases (leading zeros, overflow, signs, trailing junk) matter more
 * than the happy path.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "meta/meta.h"

#define KIB (UINT64_C(1) << 10)
#define MIB (UINT64_C(1) << 20)
#define GIB (UINT64_C(1) << 30)
#define TIB (UINT64_C(1) << 40)

static void assert_rank(const char *s, int want)
{
	int got = meta_parse_rank(s);

	cr_assert_eq(got, want, "meta_parse_rank(\"%s\") = %d, want %d", s, got, want);
}

static void assert_rank_rejected(const char *s)
{
	int got = meta_parse_rank(s);

	cr_assert_eq(got, -EINVAL, "meta_parse_rank(\"%s\") = %d, want -EINVAL", s, got);
}

static void assert_ns(const char *s, int want)
{
	int got = meta_check_ns(s);

	cr_assert_eq(got, want, "meta_check_ns(\"%s\") = %d (%s), want %d", s, got,
	             got ? strerror(-got) : "ok", want);
}

static void assert_name(const char *s, int want)
{
	int got = meta_check_name(s);

	cr_assert_eq(got, want, "meta_check_name(\"%.40s\"%s, %zu bytes) = %d (%s), want %d", s,
	             strlen(s) > 40 ? "..." : "", strlen(s), got, got ? strerror(-got) : "ok",
	             want);
	/* the variant that also measures the name answers the same */
	size_t len = 12345;
	cr_assert_eq(meta_check_name_len(s, &len), want, "meta_check_name_len(\"%.40s\")", s);
	if (!strchr(s, '/'))
		cr_assert_eq(len, strlen(s), "meta_check_name_len(\"%.40s\") measured %zu", s, len);
}

static void assert_size(const char *s, uint64_t want)
{
	uint64_t got = 0xdeadbeef;
	int ret = meta_parse_size(s, &got);

	cr_assert_eq(ret, 0, "meta_parse_size(\"%s\"): %s", s, strerror(-ret));
	cr_assert_eq(got, want, "meta_parse_size(\"%s\") = %llu, want %llu", s,
	             (unsigned long long)got, (unsigned long long)want);
}

static void assert_size_rejected(const char *s)
{
	uint64_t got = 0;
	int ret = meta_parse_size(s, &got);

	cr_assert_eq(ret, -EINVAL, "meta_parse_size(\"%s\") = %d (value %llu), want -EINVAL", s,
	             ret, (unsigned long long)got);
}

static void assert_format(uint64_t bytes, const char *want)
{
	char buf[64];

	memset(buf, 'x', sizeof(buf));
	meta_format_size(bytes, buf, sizeof(buf));
	cr_assert(memchr(buf, '\0', sizeof(buf)) != NULL,
	          "meta_format_size(%llu) left the buffer unterminated", (unsigned long long)bytes);
	cr_assert_str_eq(buf, want, "meta_format_size(%llu) = \"%s\", want \"%s\"",
	                 (unsigned long long)bytes, buf, want);
}

static void fill(char *buf, char c, size_t n)
{
	memset(buf, c, n);
	buf[n] = '\0';
}

/* ---- ranks ---- */

Test(names, rank_accepts_canonical_decimals_from_0_to_65535)
{
	assert_rank("0", 0);
	assert_rank("1", 1);
	assert_rank("10", 10);
	assert_rank("4096", 4096);
	assert_rank("65535", META_RANK_MAX);
}

Test(names, rank_rejects_leading_zeros_so_each_rank_has_one_name)
{
	assert_rank_rejected("01");
	assert_rank_rejected("00");
	assert_rank_rejected("007");
}

Test(names, rank_rejects_values_above_65535)
{
	assert_rank_rejected("65536");
	assert_rank_rejected("99999");
	assert_rank_rejected("4294967296");
	assert_rank_rejected("99999999999999999999999");
}

Test(names, rank_rejects_signs_spaces_and_junk)
{
	assert_rank_rejected("");
	assert_rank_rejected("-1");
	assert_rank_rejected("-0");
	assert_rank_rejected("+1");
	assert_rank_rejected(" 1");
	assert_rank_rejected("1 ");
	assert_rank_rejected("1a");
	assert_rank_rejected("0x10");
	assert_rank_rejected("kv");
	assert_rank_rejected("1.0");
}

/* ---- namespaces ---- */

Test(names, ns_accepts_sglang_pool_names)
{
	assert_ns("kv", 0);
	assert_ns("mamba", 0);
	assert_ns("swa", 0);
	assert_ns("indexer", 0);
	assert_ns("draft", 0);
	assert_ns("deepseek_v4_c4_indexer", 0);
	assert_ns("0", 0);
	assert_ns("_", 0);
}

Test(names, ns_accepts_64_chars_and_rejects_65)
{
	char s[META_NS_MAX + 2];

	fill(s, 'a', META_NS_MAX);
	assert_ns(s, 0);
	fill(s, 'a', META_NS_MAX + 1);
	assert_ns(s, -EINVAL);
}

Test(names, ns_rejects_empty_uppercase_and_punctuation)
{
	assert_ns("", -EINVAL);
	assert_ns("KV", -EINVAL);
	assert_ns("Kv", -EINVAL);
	assert_ns("k-v", -EINVAL);
	assert_ns("k.v", -EINVAL);
	assert_ns("k/v", -EINVAL);
	assert_ns("k v", -EINVAL);
	assert_ns(".", -EINVAL);
	assert_ns("..", -EINVAL);
	assert_ns("kv\n", -EINVAL);
	assert_ns("k\xc3\xa9", -EINVAL);
}

/* ---- page file names ---- */

Test(names, name_accepts_sglang_keys_and_temp_names)
{
	assert_name("0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	            "_Qwen-Qwen3-32B_0_2.bin",
	            0);
	assert_name("k.bin.tmp.1234.5678.0f8fad5b-d9cb-469f-a165-70867728950e", 0);
	assert_name("x", 0);
	assert_name("...", 0);
	assert_name(".hidden", 0);
	assert_name("..x", 0);
	assert_name("with space", 0);
	assert_name("caf\xc3\xa9", 0);
}

Test(names, name_rejects_empty_dot_dotdot_and_slash)
{
	assert_name("", -EINVAL);
	assert_name(".", -EINVAL);
	assert_name("..", -EINVAL);
	assert_name("/", -EINVAL);
	assert_name("a/b", -EINVAL);
	assert_name("/a", -EINVAL);
	assert_name("a/", -EINVAL);
	cr_assert_eq(meta_check_name(NULL), -EINVAL);
	/* only "." and ".." themselves are refused */
	assert_name("...", 0);
	assert_name(".a", 0);
	assert_name("..a", 0);
	assert_name("a.", 0);
}

Test(names, name_with_a_slash_past_255_bytes_is_invalid_not_too_long)
{
	char s[META_NAME_MAX + 3];

	fill(s, 'n', META_NAME_MAX + 2);
	s[META_NAME_MAX + 1] = '/';
	assert_name(s, -EINVAL);
}

Test(names, name_accepts_255_bytes_and_rejects_256_with_enametoolong)
{
	char s[META_NAME_MAX + 2];

	fill(s, 'n', META_NAME_MAX);
	assert_name(s, 0);
	fill(s, 'n', META_NAME_MAX + 1);
	assert_name(s, -ENAMETOOLONG);
}

/* ---- sizes ---- */

Test(names, size_accepts_plain_bytes_and_binary_suffixes)
{
	assert_size("4096", 4096);
	assert_size("1", 1);
	assert_size("1000", 1000);
	assert_size("64K", 64 * KIB);
	assert_size("16M", 16 * MIB);
	assert_size("1G", GIB);
	assert_size("1T", TIB);
	assert_size("1K", KIB);
	assert_size("1024K", MIB);
}

Test(names, size_accepts_any_multiple_of_a_suffix)
{
	assert_size("3K", 3 * KIB);
	assert_size("3072", 3 * KIB);
	assert_size("640M", 640 * MIB);
	assert_size("1000G", 1000 * GIB);
	assert_size("16384T", 16384 * TIB);
}

Test(names, size_accepts_the_largest_exact_values)
{
	assert_size("18446744073709551615", UINT64_MAX);
	assert_size("16777215T", UINT64_C(16777215) * TIB);
}

Test(names, size_rejects_fractions_signs_and_unknown_suffixes)
{
	assert_size_rejected("");
	assert_size_rejected("1.5M");
	assert_size_rejected("-1");
	assert_size_rejected("-1K");
	assert_size_rejected("1X");
	assert_size_rejected("K");
	assert_size_rejected("M");
	assert_size_rejected("16MM");
	assert_size_rejected("16M1");
	assert_size_rejected("abc");
	assert_size_rejected("0x1000");
}

Test(names, size_rejects_values_that_overflow_64_bits)
{
	assert_size_rejected("99999999T");
	assert_size_rejected("16777216T");
	assert_size_rejected("17179869184G");
	assert_size_rejected("18446744073709551616");
	assert_size_rejected("99999999999999999999999999");
}

Test(names, format_uses_the_largest_exact_suffix)
{
	assert_format(4096, "4K");
	assert_format(64 * KIB, "64K");
	assert_format(16 * MIB, "16M");
	assert_format(GIB, "1G");
	assert_format(TIB, "1T");
	assert_format(3 * KIB, "3K");
	assert_format(1025 * KIB, "1025K");
	assert_format(1536 * MIB, "1536M");
	assert_format(1024 * TIB, "1024T");
}

Test(names, format_keeps_plain_bytes_when_no_suffix_is_exact)
{
	assert_format(0, "0");
	assert_format(1, "1");
	assert_format(1000, "1000");
	assert_format(1536, "1536");
	assert_format(KIB + 1, "1025");
	assert_format(UINT64_MAX, "18446744073709551615");
}

Test(names, format_output_parses_back_to_the_same_value)
{
	static const uint64_t values[] = {
		1,        512,        1000, 4096, 3 * KIB, 64 * KIB,       MIB + 1,
		16 * MIB, 1536 * MIB, GIB,  TIB,  3 * TIB, 16777215 * TIB, UINT64_MAX,
	};

	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		char buf[64];
		uint64_t back = 0;

		meta_format_size(values[i], buf, sizeof(buf));
		int ret = meta_parse_size(buf, &back);

		cr_assert_eq(ret, 0, "parse(format(%llu) = \"%s\"): %s",
		             (unsigned long long)values[i], buf, strerror(-ret));
		cr_assert_eq(back, values[i], "parse(format(%llu) = \"%s\") = %llu",
		             (unsigned long long)values[i], buf, (unsigned long long)back);
	}
}

Test(names, format_never_writes_past_the_buffer_length)
{
	char buf[16];

	memset(buf, '#', sizeof(buf));
	meta_format_size(UINT64_MAX, buf, 4);
	cr_assert_eq(buf[3], '\0', "a 4-byte buffer must end in NUL, got '%c'", buf[3]);
	for (size_t i = 4; i < sizeof(buf); i++)
		cr_assert_eq(buf[i], '#', "byte %zu past the 4-byte buffer was written", i);
}

/* ---- data file prefixes ---- */

Test(names, prefix_accepts_plain_file_name_characters)
{
	char buf[META_PREFIX_MAX + 2];

	cr_assert_eq(meta_check_prefix("hicache"), 0);
	cr_assert_eq(meta_check_prefix("a.b-c_D9"), 0);
	cr_assert_eq(meta_check_prefix(".hidden"), 0);
	fill(buf, 'p', META_PREFIX_MAX);
	cr_assert_eq(meta_check_prefix(buf), 0);
	fill(buf, 'p', META_PREFIX_MAX + 1);
	cr_assert_eq(meta_check_prefix(buf), -EINVAL);
}

Test(names, prefix_rejects_paths_and_dot_dot)
{
	const char *bad[] = {"",     "a/b",    "/abs",   "..",    "../x", "x..",
	                     "a..b", "x/../y", "sp ace", "tab\t", "nl\n", "\xc3\xa9"};

	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		cr_assert_eq(meta_check_prefix(bad[i]), -EINVAL,
		             "meta_check_prefix(\"%s\") accepted", bad[i]);
	cr_assert_eq(meta_check_prefix(NULL), -EINVAL);
}

Test(names, xattr_size_value_ignores_trailing_newlines_and_nuls_only)
{
	uint64_t v = 0;

	cr_assert_eq(meta_parse_size_value("64K", 3, &v), 0);
	cr_assert_eq(v, 65536);
	cr_assert_eq(meta_parse_size_value("1M\n\0", 4, &v), 0);
	cr_assert_eq(v, 1 << 20);
	cr_assert_eq(meta_parse_size_value("4096junk", 4, &v), 0, "only size bytes are read");
	cr_assert_eq(v, 4096);
	cr_assert_eq(meta_parse_size_value("2M\0junk", 7, &v), -EINVAL, "NUL inside");
	cr_assert_eq(meta_parse_size_value("0", 1, &v), -EINVAL, "zero");
	cr_assert_eq(meta_parse_size_value("\n\0", 2, &v), -EINVAL, "nothing but padding");
	cr_assert_eq(meta_parse_size_value(" 1M", 3, &v), -EINVAL, "leading space");
}
