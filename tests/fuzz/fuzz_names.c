/*
 * fuzz_names.c - libFuzzer target for the parsers of names and sizes
 * (meta/names.c): meta_parse_size, meta_parse_rank, meta_check_ns,
 * meta_check_name, meta_check_prefix; and the packed form a page keeps
 * of a valid name (meta/pname.c). The input is one C string (cut at its
 * first NUL); each parser's answer is checked against its contract.
 */
#include "meta/cluster.h"
#include "meta/index.h"
#include "meta/meta.h"
#include "meta/ops.h"
#include "meta/record.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "fuzz_names: " __VA_ARGS__);                               \
			fprintf(stderr, " [%s]\n", #cond);                                         \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

static void check_size(const char *s)
{
	uint64_t v = 0, again = 0;
	char buf[64];

	if (meta_parse_size(s, &v) < 0)
		return;
	meta_format_size(v, buf, sizeof(buf));
	CHECK(meta_parse_size(buf, &again) == 0, "format_size(%llu) = '%s' does not parse",
	      (unsigned long long)v, buf);
	CHECK(again == v, "'%s' -> %llu -> '%s' -> %llu", s, (unsigned long long)v, buf,
	      (unsigned long long)again);
}

static void check_rank(const char *s)
{
	int r = meta_parse_rank(s);
	char buf[16];

	CHECK(r >= 0 || r == -EINVAL, "parse_rank('%s') = %d", s, r);
	if (r < 0)
		return;
	CHECK(r <= META_RANK_MAX, "parse_rank('%s') = %d", s, r);
	snprintf(buf, sizeof(buf), "%d", r);
	CHECK(strcmp(buf, s) == 0, "rank '%s' is not canonical (%d)", s, r);
}

static void check_ns(const char *s)
{
	size_t n = strlen(s);

	if (meta_check_ns(s) < 0)
		return;
	CHECK(n >= 1 && n <= META_NS_MAX, "ns of %zu bytes accepted", n);
	CHECK(strspn(s, "abcdefghijklmnopqrstuvwxyz0123456789_") == n, "ns '%s' accepted", s);
}

static void check_name(const char *s)
{
	size_t n = strlen(s);
	int rc = meta_check_name(s);

	CHECK(rc == 0 || rc == -EINVAL || rc == -ENAMETOOLONG, "check_name = %d", rc);
	if (rc == -ENAMETOOLONG)
		CHECK(n > META_NAME_MAX, "%zu-byte name is ENAMETOOLONG", n);
	if (rc < 0)
		return;
	CHECK(n >= 1 && n <= META_NAME_MAX, "name of %zu bytes accepted", n);
	CHECK(!strchr(s, '/'), "name with '/' accepted");
	CHECK(strcmp(s, ".") != 0 && strcmp(s, "..") != 0, "'%s' accepted", s);

	/* a page of that name gives it back, and equals it and nothing else */
	char text[META_NAME_MAX + 1], other[META_NAME_MAX + 1];
	struct page *p = index_page_alloc(s, n);
	CHECK(p != NULL, "index_page_alloc('%s') failed", s);
	CHECK(strcmp(index_pname_text(p, text), s) == 0, "'%s' unpacks as '%s'", s, text);
	CHECK(index_pname_eq(p, s, n), "'%s' is not its own name", s);
	memcpy(other, s, n + 1);
	other[n - 1] ^= 1; /* another name of the same length */
	CHECK(!index_pname_eq(p, other, n), "'%s' equals '%s'", s, other);
	index_page_free(p);
}

static void check_prefix(const char *s)
{
	size_t n = strlen(s);

	if (meta_check_prefix(s) < 0)
		return;
	CHECK(n >= 1 && n <= META_PREFIX_MAX, "prefix of %zu bytes accepted", n);
	CHECK(!strchr(s, '/') && !strstr(s, ".."), "prefix '%s' accepted", s);
	/* "." is a fine prefix: its data files are "..0.bin" and so on. */
	char file[META_PREFIX_MAX + 32];
	snprintf(file, sizeof(file), "%s.%d.bin.%s", s, META_RANK_MAX, "ns");
	CHECK(meta_check_name(file) == 0, "prefix '%s' gives data file '%s'", s, file);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char *s = malloc(size + 1);

	if (!s)
		return 0;
	memcpy(s, data, size);
	s[size] = '\0';
	check_size(s);
	check_rank(s);
	check_ns(s);
	check_name(s);
	check_prefix(s);
	free(s);
	return 0;
}
