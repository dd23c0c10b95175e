/*
 * flat_write.c - the fast path for the bodies of a write (flat.h), its
 * second tier (after flat_scan.c), as flat.c's for key lists:
 * reserve_and_allocate_page_indices' {"keys": [[key, prefix_key], ...]}
 * and confirm_write's {"written_keys_to_confirm": [[key, index], ...],
 * "pages_to_release": [index, ...]}, each with an optional "namespace".
 *
 * As for key lists (flat.c): yajl parses the body's copy with its
 * printable strings emptied (flat_copy.c), the callbacks note where each
 * key lies and read the indices, and the keys are ended in place once
 * the parse is over. The body as SGLang sends it costs no tree, no copy
 * of a key and no strtod of an index (the tree reads every number both
 * as an integer and as a double). pages_to_release may be absent here.
 * Whatever is not in the plainest form (escapes, other or repeated
 * fields, a prefix that is not a string, an index that is not a plain
 * integer of at most 18 digits, no list of pairs (which the protocol
 * allows a confirm), more than max_keys pairs or indices to release, an
 * error) is left to body_parse, so both ways give the same replies.
 */
#include "serve/body.h"
#include "serve/flat.h"
#include "serve/flat_copy.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

/* What the root object's next value is. */
enum field { FIELD_NONE, FIELD_PAIRS, FIELD_RELEASE, FIELD_NS };

struct write_state {
	struct copy_root root; /* first: the shared callbacks take it; depth
	                        * 1: in the root object, 2: in a list, 3: in a pair */
	int confirm;           /* confirm_write's body, else reserve's */
	size_t max;            /* pairs, and indices to release, at most */
	enum field field;      /* the value being read, or FIELD_NONE */
	int has_pairs, has_release;
	size_t in_pair; /* items of the pair being read so far */
	struct flat_write *out;
	size_t *key_span; /* each pair's key: its index in copy->spans */
	size_t cap_keys, cap_span, cap_slots, cap_release;
	const struct span *ns;
	int oom;
};

/* Room for one more pair. 0, or -ENOMEM (noted: the parse stops). */
static int grow_pairs(struct write_state *st)
{
	struct flat_write *w = st->out;
	size_t need = w->n + 1;

	if (body_grow((void **)&w->keys, &st->cap_keys, need, sizeof(*w->keys)) < 0 ||
	    body_grow((void **)&st->key_span, &st->cap_span, need, sizeof(*st->key_span)) < 0 ||
	    (st->confirm &&
	     body_grow((void **)&w->slots, &st->cap_slots, need, sizeof(*w->slots)) < 0)) {
		st->oom = 1;
		return -ENOMEM;
	}
	return 0;
}

/* An index as body_parse takes it (an integer strtoll reads whole), in
 * its plainest form: 0, or 1 to leave the body to body_parse. */
static int read_index(const char *s, size_t len, int64_t *out)
{
	size_t i = len && s[0] == '-' ? 1 : 0;
	int64_t v = 0;

	if (len == i || len - i > FLAT_INDEX_DIGITS_MAX)
		return 1;
	for (; i < len; i++) {
		if (s[i] < '0' || s[i] > '9')
			return 1; /* a fraction or an exponent: a double */
		v = v * 10 + (s[i] - '0');
	}
	*out = s[0] == '-' ? -v : v;
	return 0;
}

static int on_number(void *ctx, const char *s, size_t len)
{
	struct write_state *st = ctx;
	struct flat_write *w = st->out;
	int64_t v;

	if (read_index(s, len, &v))
		return 0;
	if (st->root.depth == 3 && st->confirm && st->in_pair == 1) {
		w->slots[w->n] = v;
		st->in_pair = 2;
		return 1;
	}
	if (st->root.depth != 2 || st->field != FIELD_RELEASE || w->nrel == st->max)
		return 0;
	if (body_grow((void **)&w->release, &st->cap_release, w->nrel + 1, sizeof(*w->release)) <
	    0) {
		st->oom = 1;
		return 0;
	}
	w->release[w->nrel++] = v;
	return 1;
}

static int on_string(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct write_state *st = ctx;
	const struct span *sp;
	size_t count = copy_next_string(st->root.copy, copied_len, &sp);

	(void)copied;
	if (count == 0)
		return 0;
	if (st->root.depth == 1 && st->field == FIELD_NS && count == 1) {
		st->ns = sp;
		st->field = FIELD_NONE;
		return 1;
	}
	/* in a pair: its key first (and with it, in a reserve, the prefix
	 * when both are plain: one token of two strings), then the prefix */
	size_t room = st->confirm ? 1 : 2;
	if (st->root.depth != 3 || st->in_pair + count > room)
		return 0;
	if (st->in_pair == 0)
		st->key_span[st->out->n] = (size_t)(sp - st->root.copy->spans);
	st->in_pair += count;
	return 1;
}

static int on_key(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct write_state *st = ctx;
	const struct span *sp;
	size_t count = copy_next_string(st->root.copy, copied_len, &sp);

	(void)copied;
	if (count != 1 || st->root.depth != 1)
		return 0;
	const struct copy *c = st->root.copy;
	if (copy_is(c, sp, st->confirm ? "written_keys_to_confirm" : "keys") && !st->has_pairs)
		st->field = FIELD_PAIRS;
	else if (st->confirm && copy_is(c, sp, "pages_to_release") && !st->has_release)
		st->field = FIELD_RELEASE;
	else if (copy_is(c, sp, "namespace") && !st->ns)
		st->field = FIELD_NS;
	else
		return 0;
	return 1;
}

static int on_start_array(void *ctx)
{
	struct write_state *st = ctx;
	struct flat_write *w = st->out;

	if (st->root.depth == 1 && st->field == FIELD_PAIRS) {
		st->has_pairs = 1;
	} else if (st->root.depth == 1 && st->field == FIELD_RELEASE) {
		st->has_release = 1;
	} else if (st->root.depth == 2 && st->field == FIELD_PAIRS && w->n < st->max) {
		if (grow_pairs(st) < 0)
			return 0;
		st->in_pair = 0;
	} else {
		return 0;
	}
	st->root.depth++;
	return 1;
}

static int on_end_array(void *ctx)
{
	struct write_state *st = ctx;

	if (st->root.depth == 3) {
		if (st->in_pair != 2)
			return 0; /* not a pair of two: the tree says what is wrong */
		st->out->n++;
	} else {
		st->field = FIELD_NONE;
	}
	st->root.depth--;
	return 1;
}

static const yajl_callbacks write_cb = {
	.yajl_null = copy_refuse,
	.yajl_boolean = copy_refuse_bool,
	.yajl_number = on_number,
	.yajl_string = on_string,
	.yajl_start_map = copy_start_root,
	.yajl_map_key = on_key,
	.yajl_end_map = copy_end_root,
	.yajl_start_array = on_start_array,
	.yajl_end_array = on_end_array,
};

int flat_parse_write_copy(char *text, size_t len, int confirm, size_t max_keys,
                          struct flat_write *w)
{
	struct copy c;
	struct write_state st = {.root.copy = &c, .confirm = confirm, .max = max_keys, .out = w};

	memset(w, 0, sizeof(*w));
	/* a reserve's key and prefix a pair (a confirm has one string a pair),
	 * the field names, the namespace */
	size_t strings = max_keys > (SIZE_MAX - 4) / 2 ? SIZE_MAX : 2 * max_keys + 4;
	int rc = copy_make(text, len, strings, &c);
	if (rc == 0)
		rc = copy_parse(&c, text, len, &write_cb, &st);
	if (st.oom)
		rc = -ENOMEM;
	if (rc == 0 && !st.has_pairs)
		rc = 1; /* an absent list: the tree's defaults and errors */
	if (rc == 0) {
		/* each ended over its closing quote */
		for (size_t i = 0; i < w->n; i++) {
			const struct span *k = &c.spans[st.key_span[i]];
			w->keys[i] = text + k->at;
			text[k->at + k->len] = '\0';
		}
		if (st.ns) {
			w->ns = text + st.ns->at;
			text[st.ns->at + st.ns->len] = '\0';
		}
	} else {
		flat_write_free(w);
	}
	free(st.key_span);
	copy_free(&c);
	return rc;
}

void flat_write_free(struct flat_write *w)
{
	free(w->keys);
	free(w->slots);
	free(w->release);
	memset(w, 0, sizeof(*w));
}
