/*
 * flat.c - the fast path for key-list bodies (flat.h), its second tier:
 * what the scan (flat_scan.c) left, in the plainest form but for strings
 * of other bytes than printable ASCII, or in other white space.
 *
 * A batch of 128 SGLang keys is about 10 KB of JSON. body_parse builds a
 * tree of it: a node and a copy of every key, then a C array of the keys
 * from the tree. Here yajl's callbacks, parsing the body's copy with its
 * strings emptied (flat_copy.c), record where each key lies in the body,
 * and the keys are ended in place with a NUL once the parse is over: no
 * node, no copy. Anything but the plainest form of the body (escapes,
 * other fields, repeated fields, values of another type, or an error) is
 * left to body_parse, so both paths give the same replies; the unit tests
 * compare them on a corpus of bodies, and fuzz_serve runs both.
 */
#include "serve/flat.h"
#include "serve/flat_copy.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum expect { EXPECT_FIELD, EXPECT_KEYS, EXPECT_NS };

struct flat_state {
	struct copy_root root; /* first: the shared callbacks take it */
	/* The keys are copy->spans[first_key, first_key + nkeys): no other
	 * string lies inside the one "keys" array taken here. */
	size_t first_key, nkeys, max_keys;
	const struct span *ns; /* the "namespace" value, or NULL */
	int has_keys;
	enum expect expect;
};

static int refuse_number(void *ctx, const char *s, size_t len)
{
	(void)s;
	(void)len;
	return copy_refuse(ctx);
}

static int on_string(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct flat_state *st = ctx;
	const struct span *sp;
	size_t count = copy_next_string(st->root.copy, copied_len, &sp);

	(void)copied;
	if (count == 0)
		return 0;
	if (st->root.depth == 1 && st->expect == EXPECT_NS && count == 1) {
		st->ns = sp;
		st->expect = EXPECT_FIELD;
		return 1;
	}
	if (st->root.depth != 2 || count > st->max_keys - st->nkeys)
		return 0;
	if (st->nkeys == 0)
		st->first_key = (size_t)(sp - st->root.copy->spans);
	st->nkeys += count;
	return 1;
}

static int on_key(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct flat_state *st = ctx;
	const struct span *sp;
	size_t count = copy_next_string(st->root.copy, copied_len, &sp);

	(void)copied;
	if (count != 1 || st->root.depth != 1)
		return 0;
	if (copy_is(st->root.copy, sp, "keys") && !st->has_keys)
		st->expect = EXPECT_KEYS;
	else if (copy_is(st->root.copy, sp, "namespace") && !st->ns)
		st->expect = EXPECT_NS;
	else
		return 0;
	return 1;
}

static int on_start_array(void *ctx)
{
	struct flat_state *st = ctx;

	if (st->root.depth != 1 || st->expect != EXPECT_KEYS)
		return 0;
	st->root.depth = 2;
	st->has_keys = 1;
	return 1;
}

static int on_end_array(void *ctx)
{
	struct flat_state *st = ctx;

	st->root.depth = 1;
	st->expect = EXPECT_FIELD;
	return 1;
}

static const yajl_callbacks flat_cb = {
	.yajl_null = copy_refuse,
	.yajl_boolean = copy_refuse_bool,
	.yajl_number = refuse_number,
	.yajl_string = on_string,
	.yajl_start_map = copy_start_root,
	.yajl_map_key = on_key,
	.yajl_end_map = copy_end_root,
	.yajl_start_array = on_start_array,
	.yajl_end_array = on_end_array,
};

int flat_parse_copy(char *text, size_t len, size_t max_keys, struct flat *f)
{
	struct copy c;
	struct flat_state st = {.root.copy = &c, .max_keys = max_keys};

	memset(f, 0, sizeof(*f));
	/* the keys, "keys", "namespace" and its value */
	int rc = copy_make(text, len, max_keys > SIZE_MAX - 3 ? SIZE_MAX : max_keys + 3, &c);
	if (rc == 0)
		rc = copy_parse(&c, text, len, &flat_cb, &st);
	if (rc == 0 && !st.has_keys)
		rc = 1;
	if (rc == 0 && st.nkeys && !(f->keys = malloc(st.nkeys * sizeof(*f->keys))))
		rc = -ENOMEM;
	if (rc == 0) {
		/* each ended over its closing quote */
		for (size_t i = 0; i < st.nkeys; i++) {
			const struct span *k = &c.spans[st.first_key + i];
			f->keys[i] = text + k->at;
			text[k->at + k->len] = '\0';
		}
		f->n = st.nkeys;
		if (st.ns) {
			f->ns = text + st.ns->at;
			text[st.ns->at + st.ns->len] = '\0';
		}
	}
	copy_free(&c);
	return rc;
}

void flat_free(struct flat *f)
{
	free(f->keys);
	memset(f, 0, sizeof(*f));
}
