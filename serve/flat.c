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
#include "serve/body.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>

enum expect { EXPECT_FIELD, EXPECT_KEYS, EXPECT_NS };

struct flat_state {
	struct flat *f;
	size_t *lens; /* keys[i] is lens[i] bytes long */
	size_t ns_len;
	const char *text;
	size_t len;
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

static int on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct flat_state *st = ctx;
	struct flat *f = st->f;

	if (!body_slice(st->text, st->len, s, len))
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

int flat_parse(char *text, size_t len, size_t max_keys, struct flat *f)
{
	struct flat_state st = {.f = f, .text = text, .len = len, .max_keys = max_keys};
	int ok = 0;

	memset(f, 0, sizeof(*f));
	st.h = yajl_alloc(&flat_cb, NULL, &st);
	if (!st.h)
		return -ENOMEM;
	/* body_parse's checks around yajl's, so that what is taken here is
	 * what body_parse accepts */
	ok = yajl_parse(st.h, (const unsigned char *)text, len) == yajl_status_ok &&
	     yajl_complete_parse(st.h) == yajl_status_ok && st.has_keys &&
	     body_odd_space(text, len) == len && body_trailing(text, st.root_end, len) == len;
	yajl_free(st.h);
	if (ok) {
		/* over each closing quote: body_slice kept every string short
		 * of the end, so the quote is there */
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
