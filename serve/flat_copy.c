/*
 * flat_copy.c - the body as the fast paths have yajl parse it
 * (flat_copy.h).
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
 * and each callback takes the next string's place from the list
 * (copy_next).
 */
#include "serve/flat_copy.h"
#include "serve/body.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

size_t flat_string_len(const char *s, size_t room, enum string_kind *kind)
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

void copy_free(struct copy *c)
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
int copy_make(const char *text, size_t len, size_t max_strings, struct copy *c)
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
		size_t at = pos + 1, n = flat_string_len(text + at, len - at, &kind);
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

size_t copy_next(struct copy *c, const struct span **first)
{
	if (c->next == c->ntok)
		return 0;
	const struct token *t = &c->tokens[c->next++];
	*first = &c->spans[t->first];
	return t->count;
}

size_t copy_next_string(struct copy *c, size_t copied_len, const struct span **first)
{
	size_t count = copy_next(c, first);

	return count && (copied_len == 0 || copied_len == (*first)->len) ? count : 0;
}

int copy_is(const struct copy *c, const struct span *sp, const char *name)
{
	size_t len = strlen(name);

	return sp->len == len && memcmp(c->src + sp->at, name, len) == 0;
}

int copy_start_root(void *ctx)
{
	struct copy_root *root = ctx;

	if (root->depth != 0)
		return 0;
	root->depth = 1;
	return 1;
}

int copy_end_root(void *ctx)
{
	struct copy_root *root = ctx;

	root->depth = 0;
	/* where the root ends, for copy_parse's check of what follows it */
	root->copy->root_end = yajl_get_bytes_consumed(root->copy->h);
	return 1;
}

int copy_refuse(void *ctx)
{
	(void)ctx;
	return 0;
}

int copy_refuse_bool(void *ctx, int b)
{
	(void)b;
	return copy_refuse(ctx);
}

int copy_parse(struct copy *c, const char *text, size_t len, const yajl_callbacks *cb, void *ctx)
{
	int rc = 0;

	if (!(c->h = yajl_alloc(cb, NULL, ctx)))
		return -ENOMEM;
	/* body_parse's checks around yajl's, so that what is taken here is
	 * what body_parse accepts (what follows the root is white space in
	 * the copy if and only if it is in the body: a string is not) */
	if (!(yajl_parse(c->h, (const unsigned char *)c->text, c->len) == yajl_status_ok &&
	      yajl_complete_parse(c->h) == yajl_status_ok && body_not_json(text, len) == len &&
	      body_trailing(c->text, c->root_end, c->len) == c->len))
		rc = 1;
	yajl_free(c->h);
	c->h = NULL;
	return rc;
}
