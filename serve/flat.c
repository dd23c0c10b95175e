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
 *
 * yajl lexes a string a byte at a time, and the keys are nine tenths of
 * the body: that loop was a quarter of an exists request's CPU. So yajl
 * parses a copy of the body in which every string of printable ASCII is
 * emptied ("") and everything else is as sent. A scan for quotes finds
 * the strings, sixteen bytes at a time, noting whether each is printable;
 * a backslash in a string (the only thing that lets a quote stand inside
 * one) leaves the body to body_parse, and one outside a string stays in
 * the copy for yajl to refuse. yajl still checks the grammar
 * and every string not emptied; an emptied one needs no check, since any
 * byte from 0x20 to 0x7f but the quote and the backslash may stand in a
 * JSON string as it is. yajl reports strings in the order of the text,
 * and each callback takes the next string's place from the list.
 */
#include "serve/flat.h"
#include "serve/body.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_parse.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

enum expect { EXPECT_FIELD, EXPECT_KEYS, EXPECT_NS };

/* Where a string of the body lies: text[at, at + len), quotes excluded
 * (a body taken here is under 4 GiB). */
struct span {
	uint32_t at, len;
};

/* A string of the copy: it stands for count strings of the body, from
 * spans[first] on. */
struct token {
	size_t first, count;
};

/* How deep arrays and objects may nest in a body taken here. */
#define COPY_DEPTH 64

/* The body as yajl parses it: the copy, the strings of the body and the
 * strings of the copy. */
struct copy {
	const char *src; /* the body */
	char *text;
	size_t len;
	struct span *spans;
	size_t n, cap;
	struct token *tokens;
	size_t ntok, captok;
};

struct flat_state {
	const struct copy *copy;
	size_t next; /* the next string's index in copy->tokens */
	/* The keys are copy->spans[first_key, first_key + nkeys): no other
	 * string lies inside the one "keys" array taken here. */
	size_t first_key, nkeys, max_keys;
	const struct span *ns; /* the "namespace" value, or NULL */
	yajl_handle h;
	int depth, has_keys;
	enum expect expect;
	size_t root_end; /* offset in the copy just past the closing brace */
};

/* What string_len found in a string. */
enum string_kind {
	STRING_PLAIN,   /* bytes 0x20 to 0x7f only: valid JSON as it stands */
	STRING_OTHER,   /* other bytes too: for yajl to check */
	STRING_ESCAPED, /* a backslash: the quote found may be escaped */
};

/*
 * The length of the string whose text starts at s: the bytes before the
 * first quote in s[0..room), or room if there is none, and in *kind what
 * they hold (STRING_ESCAPED: the length up to the backslash). Sixteen
 * bytes at a time with SSE2: a signed comparison below 0x20 is true of
 * the bytes below 0x20 and of those from 0x80.
 */
static size_t string_len(const char *s, size_t room, enum string_kind *kind)
{
	unsigned bad = 0;
	size_t i = 0;

#ifdef __SSE2__
	const __m128i quote = _mm_set1_epi8('"'), escape = _mm_set1_epi8('\\');
	const __m128i space = _mm_set1_epi8(0x20);
	for (; i + 16 <= room; i += 16) {
		__m128i v = _mm_loadu_si128((const void *)(s + i));
		unsigned q = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, quote));
		unsigned e = (unsigned)_mm_movemask_epi8(_mm_cmpeq_epi8(v, escape));
		unsigned b = (unsigned)_mm_movemask_epi8(_mm_cmplt_epi8(v, space));
		unsigned before = q ? (q & -q) - 1 : 0xffffu; /* the bytes before the quote */
		if (e & before) {
			*kind = STRING_ESCAPED;
			return i + (size_t)__builtin_ctz(e);
		}
		bad |= b & before;
		if (q) {
			*kind = bad ? STRING_OTHER : STRING_PLAIN;
			return i + (size_t)__builtin_ctz(q);
		}
	}
#endif
	for (; i < room; i++) {
		if (s[i] == '"') {
			*kind = bad ? STRING_OTHER : STRING_PLAIN;
			return i;
		}
		if (s[i] == '\\') {
			*kind = STRING_ESCAPED;
			return i;
		}
		bad |= (uint8_t)(s[i] - 0x20) >= 0x60;
	}
	*kind = STRING_OTHER;
	return room;
}

/* Notes the string text[at, at + len): a token of its own, or one more
 * of the last token's. 0 or -ENOMEM. */
static int span_add(struct copy *c, size_t at, size_t len, int own)
{
	if (body_grow((void **)&c->spans, &c->cap, c->n + 1, sizeof(*c->spans)) < 0 ||
	    (own &&
	     body_grow((void **)&c->tokens, &c->captok, c->ntok + 1, sizeof(*c->tokens)) < 0))
		return -ENOMEM;
	if (own)
		c->tokens[c->ntok++] = (struct token){c->n, 0};
	c->tokens[c->ntok - 1].count++;
	c->spans[c->n++] = (struct span){(uint32_t)at, (uint32_t)len};
	return 0;
}

static void copy_free(struct copy *c)
{
	free(c->text);
	free(c->spans);
	free(c->tokens);
}

/*
 * Makes c, the body with its printable strings emptied, and in an array a
 * run of them (one after the other, a comma and white space between) made
 * one: a run of values in an array is a value as far as the grammar goes,
 * so the copy is JSON if and only if the body is. Anywhere else (an
 * object's keys and values) every string stays a string of its own. 0, or
 * 1 if the body is not for here (a backslash, a quote that is not closed,
 * a bracket that closes nothing, nesting over COPY_DEPTH, more than
 * max_strings strings, 4 GiB or more), or -ENOMEM.
 */
static int copy_make(const char *text, size_t len, size_t max_strings, struct copy *c)
{
	uint64_t arrays = 0; /* bit 0: the innermost level is an array */
	int depth = 0, run = 0;

	memset(c, 0, sizeof(*c));
	c->src = text;
	if (len >= UINT32_MAX)
		return 1;
	if (!(c->text = malloc(len + 1)))
		return -ENOMEM;
	for (size_t pos = 0;;) {
		/* between strings: a few bytes of structure */
		size_t mark = c->len;
		int commas = 0, other = 0;
		for (; pos < len && text[pos] != '"'; pos++) {
			char ch = text[pos];
			if (ch == ',')
				commas++;
			else if (ch != ' ' && ch != '\t' && ch != '\n' && ch != '\r')
				other = 1;
			if (ch == '[' || ch == '{') {
				if (++depth == COPY_DEPTH)
					return 1;
				arrays = arrays << 1 | (ch == '[');
			} else if (ch == ']' || ch == '}') {
				if (depth-- == 0)
					return 1;
				arrays >>= 1;
			}
			c->text[c->len++] = ch;
		}
		if (pos == len)
			return 0;
		enum string_kind kind;
		size_t at = pos + 1, n = string_len(text + at, len - at, &kind);
		if (n == len - at || kind == STRING_ESCAPED)
			return 1; /* not closed, or an escape */
		int plain = kind == STRING_PLAIN;
		if (c->n == max_strings)
			return 1;
		int more = run && plain && commas == 1 && !other;
		if (span_add(c, at, n, !more) < 0)
			return -ENOMEM;
		if (more) {
			c->len = mark; /* the comma goes with the string */
		} else if (plain) {
			memcpy(c->text + c->len, "\"\"", 2);
			c->len += 2;
		} else {
			memcpy(c->text + c->len, text + pos, n + 2);
			c->len += n + 2;
		}
		run = plain && depth > 0 && (arrays & 1);
		pos = at + n + 1;
	}
}

/* The strings of the body the string yajl reports now stands for, from
 * *first on, or 0 if there are none. */
static size_t next_strings(struct flat_state *st, const struct span **first)
{
	if (st->next == st->copy->ntok)
		return 0;
	const struct token *t = &st->copy->tokens[st->next++];
	*first = &st->copy->spans[t->first];
	return t->count;
}

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

static int on_string(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct flat_state *st = ctx;
	const struct span *sp;
	size_t count = next_strings(st, &sp);

	/* an emptied string, or one yajl had whole, as it stands */
	(void)copied;
	if (count == 0 || (copied_len != 0 && copied_len != sp->len))
		return 0;
	if (st->depth == 1 && st->expect == EXPECT_NS && count == 1) {
		st->ns = sp;
		st->expect = EXPECT_FIELD;
		return 1;
	}
	if (st->depth != 2 || count > st->max_keys - st->nkeys)
		return 0;
	if (st->nkeys == 0)
		st->first_key = (size_t)(sp - st->copy->spans);
	st->nkeys += count;
	return 1;
}

static int on_key(void *ctx, const unsigned char *copied, size_t copied_len)
{
	struct flat_state *st = ctx;
	const struct span *sp;
	size_t count = next_strings(st, &sp);

	(void)copied;
	if (count != 1 || (copied_len != 0 && copied_len != sp->len) || st->depth != 1)
		return 0;
	const char *s = st->copy->src + sp->at;
	size_t len = sp->len;
	if (len == 4 && memcmp(s, "keys", 4) == 0 && !st->has_keys)
		st->expect = EXPECT_KEYS;
	else if (len == 9 && memcmp(s, "namespace", 9) == 0 && !st->ns)
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
	struct copy c;
	struct flat_state st = {.copy = &c, .max_keys = max_keys};

	memset(f, 0, sizeof(*f));
	/* the keys, "keys", "namespace" and its value */
	int rc = copy_make(text, len, max_keys > SIZE_MAX - 3 ? SIZE_MAX : max_keys + 3, &c);
	if (rc == 0 && !(st.h = yajl_alloc(&flat_cb, NULL, &st)))
		rc = -ENOMEM;
	/* body_parse's checks around yajl's, so that what is taken here is
	 * what body_parse accepts (what follows the root is white space in
	 * the copy if and only if it is in the body: a string is not) */
	if (rc == 0 && !(yajl_parse(st.h, (const unsigned char *)c.text, c.len) == yajl_status_ok &&
	                 yajl_complete_parse(st.h) == yajl_status_ok && st.has_keys &&
	                 body_odd_space(text, len) == len &&
	                 body_trailing(c.text, st.root_end, c.len) == c.len))
		rc = 1;
	if (st.h)
		yajl_free(st.h);
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
