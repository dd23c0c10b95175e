/*
 * flat.c - the fast path for key-list bodies (flat.h).
 *
 * A batch of 128 SGLang keys is about 10 KB of JSON. body_parse builds a
 * tree of it: a node and a copy of every key, then a C array of the keys
 * from the tree. Here yajl's callbacks record where each key lies in the
 * body, and the keys are ended in place with a NUL once the parse is
 * over: no node, no copy. Anything but the plainest form of the body
 * (escapes, other fields, repeated fields, values of another type, or an
 * error) is left to body_parse, so both paths give the same replies; the
 * unit tests compare them on a corpus of bodies, and fuzz_serve runs both.
 */
#include "serve/flat.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

enum expect { EXPECT_FIELD, EXPECT_KEYS, EXPECT_NS };

struct flat_state {
	struct flat *f;
	size_t *lens; /* keys[i] is lens[i] bytes long */
	size_t ns_len;
	const char *text, *text_end;
	size_t max_keys;
	yajl_handle h;
	int depth, has_keys, oom;
	enum expect expect;
	size_t root_end; /* offset just past the closing brace */
};

static int fail(void *ctx)
{
	(void)ctx;
	return 0; /* not flat: yajl stops, the caller takes the general way */
}

static int fail_bool(void *ctx, int b)
{
	(void)b;
	return fail(ctx);
}

static int fail_number(void *ctx, const char *s, size_t len)
{
	(void)s;
	(void)len;
	return fail(ctx);
}

/* A slice of the body, which is what yajl hands over for a string without
 * escapes; a decoded string lies elsewhere. */
static int in_body(const struct flat_state *st, const unsigned char *s, size_t len)
{
	uintptr_t a = (uintptr_t)s;
	return a >= (uintptr_t)st->text && a + len < (uintptr_t)st->text_end;
}

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct flat_state *st = ctx;
	struct flat *f = st->f;

	if (!in_body(st, s, len))
		return 0;
	if (st->depth == 1 && st->expect == EXPECT_NS) {
		f->ns = (const char *)s;
		st->ns_len = len;
		st->expect = EXPECT_FIELD;
		return 1;
	}
	if (st->depth != 2 || f->n == st->max_keys)
		return 0;
	if (f->n == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 256;
		const char **k = realloc(f->keys, cap * sizeof(*k));
		if (k)
			f->keys = k;
		size_t *l = k ? realloc(st->lens, cap * sizeof(*l)) : NULL;
		if (!l) {
			st->oom = 1;
			return 0;
		}
		st->lens = l;
		f->cap = cap;
	}
	f->keys[f->n] = (const char *)s;
	st->lens[f->n++] = len;
	return 1;
}

static int on_key(void *ctx, const unsigned char *s, size_t len)
{
	struct flat_state *st = ctx;

	if (st->depth != 1)
		return 0;
	if (len == 4 && memcmp(s, "keys", 4) == 0 && !st->has_keys)
		st->expect = EXPECT_KEYS;
	else if (len == 9 && memcmp(s, "namespace", 9) == 0 && !st->f->ns)
		st->expect = EXPECT_NS;
	else
		return 0;
	return 1;
}

static int on_start_map(void *ctx)
{
	struct flat_state *st = ctx;

	if (st->depth != 0)
		return 0;
	st->depth = 1;
	return 1;
}

static int on_end_map(void *ctx)
{
	struct flat_state *st = ctx;

	st->depth = 0;
	st->root_end = yajl_get_bytes_consumed(st->h);
	return 1;
}

static int on_start_array(void *ctx)
{
	struct flat_state *st = ctx;

	if (st->depth != 1 || st->expect != EXPECT_KEYS)
		return 0;
	st->depth = 2;
	st->has_keys = 1;
	return 1;
}

static int on_end_array(void *ctx)
{
	struct flat_state *st = ctx;

	st->depth = 1;
	st->expect = EXPECT_FIELD;
	return 1;
}

static const yajl_callbacks flat_cb = {
	.yajl_null = fail,
	.yajl_boolean = fail_bool,
	.yajl_number = fail_number,
	.yajl_string = on_string,
	.yajl_start_map = on_start_map,
	.yajl_map_key = on_key,
	.yajl_end_map = on_end_map,
	.yajl_start_array = on_start_array,
	.yajl_end_array = on_end_array,
};

/* Whether text[from..to) holds \v or \f, which yajl takes for white space
 * and JSON does not (body_parse refuses them). */
static int odd_space(const char *text, size_t from, size_t to)
{
	for (size_t i = from; i < to; i++)
		if (text[i] == '\v' || text[i] == '\f')
			return 1;
	return 0;
}

/* The checks body_parse makes around yajl's: no \v or \f between the
 * tokens (strings cannot hold them: yajl refuses control characters in
 * strings) and only JSON white space after the closing brace. */
static int strict(const struct flat_state *st, const char *text, size_t len)
{
	const struct flat *f = st->f;
	size_t at = 0;
	int ns_first = f->ns && (f->n == 0 || f->ns < f->keys[0]);

	if (ns_first) {
		if (odd_space(text, 0, (size_t)(f->ns - text)))
			return 0;
		at = (size_t)(f->ns - text) + st->ns_len;
	}
	for (size_t i = 0; i < f->n; i++) {
		size_t start = (size_t)(f->keys[i] - text);
		if (odd_space(text, at, start))
			return 0;
		at = start + st->lens[i];
	}
	if (f->ns && !ns_first) {
		if (odd_space(text, at, (size_t)(f->ns - text)))
			return 0;
		at = (size_t)(f->ns - text) + st->ns_len;
	}
	if (odd_space(text, at, st->root_end))
		return 0;
	for (size_t i = st->root_end; i < len; i++)
		if (!strchr(" \t\n\r", text[i]) || text[i] == '\0')
			return 0;
	return 1;
}

int flat_parse(char *text, size_t len, size_t max_keys, struct flat *f)
{
	struct flat_state st = {.f = f, .text = text, .text_end = text + len, .max_keys = max_keys};
	int ok = 0;

	memset(f, 0, sizeof(*f));
	st.h = yajl_alloc(&flat_cb, NULL, &st);
	if (!st.h)
		return -ENOMEM;
	ok = yajl_parse(st.h, (const unsigned char *)text, len) == yajl_status_ok &&
	     yajl_complete_parse(st.h) == yajl_status_ok && st.has_keys && strict(&st, text, len);
	yajl_free(st.h);
	if (ok) {
		/* over each closing quote: in_body kept every string short of
		 * the end, so the quote is there */
		for (size_t i = 0; i < f->n; i++)
			text[f->keys[i] - text + st.lens[i]] = '\0';
		if (f->ns)
			text[f->ns - text + st.ns_len] = '\0';
	}
	free(st.lens);
	if (!ok) {
		int oom = st.oom;
		flat_free(f);
		return oom ? -ENOMEM : 1;
	}
	return 0;
}

void flat_free(struct flat *f)
{
	free(f->keys);
	memset(f, 0, sizeof(*f));
}
