/*
 * body.c - request bodies and reply text for the HTTP protocol.
 *
 * Bodies are parsed by yajl's streaming parser (strict: no comments,
 * UTF-8 checked) into a yajl_val tree this file builds in one arena. It
 * costs about a tenth of what jansson's parser did for a batch of 128
 * SGLang keys, which was half of the server's time per request.
 */
#include "serve/body.h"

#include <errno.h>
#include <stdalign.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <yajl/yajl_gen.h>
#include <yajl/yajl_parse.h>

void out_reserve(struct out *o, size_t n)
{
	if (o->oom || o->len + n + 1 <= o->cap)
		return;
	size_t c = o->cap ? o->cap : 256;
	while (c < o->len + n + 1)
		c *= 2;
	char *b = realloc(o->buf, c);
	if (!b) {
		o->oom = 1;
		return;
	}
	o->buf = b;
	o->cap = c;
}

void out_int(struct out *o, long long v)
{
	char tmp[24];
	char *e = tmp + sizeof(tmp), *d = e;
	unsigned long long u = v < 0 ? 0ULL - (unsigned long long)v : (unsigned long long)v;

	do {
		*--d = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (v < 0)
		*--d = '-';
	out_add(o, d, (size_t)(e - d));
}

void out_fmt(struct out *o, const char *fmt, ...)
{
	char tmp[64];
	va_list ap;

	va_start(ap, fmt);
	int n = vsnprintf(tmp, sizeof(tmp), fmt, ap);
	va_end(ap);
	if (n > 0)
		out_add(o, tmp, (size_t)n < sizeof(tmp) ? (size_t)n : sizeof(tmp) - 1);
}

static void gen_print(void *ctx, const char *s, size_t n)
{
	out_add(ctx, s, n);
}

/* Where s[0..n) stops being UTF-8 as RFC 3629 has it (n: nowhere): yajl's
 * check takes an overlong form (C0 BC for '<'), a surrogate or a code
 * point past U+10FFFF, which JSON parsers such as Python's and jansson
 * refuse. */
static size_t utf8_end(const unsigned char *s, size_t n)
{
	for (size_t i = 0; i < n;) {
		unsigned c = s[i];
		if (c < 0x80) {
			i++;
			continue;
		}
		size_t more = c >= 0xc2 && c <= 0xdf   ? 1
		              : (c & 0xf0) == 0xe0     ? 2
		              : c >= 0xf0 && c <= 0xf4 ? 3
		                                       : 4;
		if (more == 4 || n - i <= more)
			return i;              /* not a lead byte, or cut short */
		unsigned lo = 0x80, hi = 0xbf; /* the second byte's range */
		if (c == 0xe0)
			lo = 0xa0; /* overlong */
		else if (c == 0xed)
			hi = 0x9f; /* surrogates */
		else if (c == 0xf0)
			lo = 0x90; /* overlong */
		else if (c == 0xf4)
			hi = 0x8f; /* past U+10FFFF */
		for (size_t k = 1; k <= more; k++)
			if (s[i + k] < (k == 1 ? lo : 0x80) || s[i + k] > (k == 1 ? hi : 0xbf))
				return i;
		i += more + 1;
	}
	return n;
}

static int utf8_strict(const unsigned char *s, size_t n)
{
	return utf8_end(s, n) == n;
}

/* The value of the 4 hex digits at s, or -1. */
static long hex4(const char *s)
{
	long v = 0;

	for (int k = 0; k < 4; k++) {
		int c = (unsigned char)s[k], d = c >= '0' && c <= '9'   ? c - '0'
		                                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
		                                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
		                                                        : -1;
		if (d < 0)
			return -1;
		v = v * 16 + d;
	}
	return v;
}

/* Where text[0..len) has a \u escape of a surrogate that is not a high
 * one followed by a low one (len: nowhere). yajl turns a lone high
 * surrogate into '?' and drops the character after it, so "\ud800ab" and
 * "\ud800cb" were one page name, a lone low one into the bytes of a
 * surrogate, and pairs a high one with any escape after it. Backslashes
 * stand only in strings (elsewhere yajl refuses the body). */
static size_t surrogate_end(const char *text, size_t len)
{
	const char *s = memchr(text, '\\', len), *end = text + len;

	while (s && end - s >= 2) {
		long v = s[1] == 'u' && end - s >= 6 ? hex4(s + 2) : -1;
		if (v >= 0xdc00 && v <= 0xdfff)
			return (size_t)(s - text); /* a low one alone */
		if (v >= 0xd800 && v <= 0xdbff) {
			long lo = end - s >= 12 && s[6] == '\\' && s[7] == 'u' ? hex4(s + 8) : -1;
			if (lo < 0xdc00 || lo > 0xdfff)
				return (size_t)(s - text);
			s += 12;
		} else {
			s += s[1] == 'u' && v >= 0 ? 6 : 2; /* (a bad escape: yajl's to refuse) */
		}
		s = s < end ? memchr(s, '\\', (size_t)(end - s)) : NULL;
	}
	return len;
}

/* A string as JSON, a value or an object's key; one that is not UTF-8 (a
 * path segment echoed back) goes out with '?' for every byte over 0x7f:
 * the generator would refuse it whole, which would leave the reply
 * without a value, or let an overlong form through. */
static void gen_string(yajl_gen g, const char *s)
{
	size_t n = strlen(s);

	if (utf8_strict((const unsigned char *)s, n) &&
	    yajl_gen_string(g, (const unsigned char *)s, n) == yajl_gen_status_ok)
		return;
	char *ascii = malloc(n + 1);
	if (!ascii) {
		yajl_gen_string(g, (const unsigned char *)"", 0); /* (a key or a value) */
		return;
	}
	for (size_t i = 0; i <= n; i++)
		ascii[i] = (unsigned char)s[i] > 0x7f ? '?' : s[i];
	yajl_gen_string(g, (const unsigned char *)ascii, n);
	free(ascii);
}

static void gen_value(yajl_gen g, yajl_val v)
{
	if (YAJL_IS_STRING(v)) { /* the YAJL_IS_ macros take NULL */
		gen_string(g, v->u.string);
	} else if (YAJL_IS_NUMBER(v)) {
		yajl_gen_number(g, v->u.number.r, strlen(v->u.number.r));
	} else if (YAJL_IS_OBJECT(v)) {
		yajl_gen_map_open(g);
		for (size_t i = 0; i < v->u.object.len; i++) {
			const char *k = v->u.object.keys[i];
			gen_string(g, k);
			gen_value(g, v->u.object.values[i]);
		}
		yajl_gen_map_close(g);
	} else if (YAJL_IS_ARRAY(v)) {
		yajl_gen_array_open(g);
		for (size_t i = 0; i < v->u.array.len; i++)
			gen_value(g, v->u.array.values[i]);
		yajl_gen_array_close(g);
	} else if (YAJL_IS_TRUE(v) || YAJL_IS_FALSE(v)) {
		yajl_gen_bool(g, YAJL_IS_TRUE(v));
	} else { /* null, or no value at all */
		yajl_gen_null(g);
	}
}

/* Runs gen(g, arg) into o through a yajl generator (escaping included). */
static void out_gen(struct out *o, void (*gen)(yajl_gen, const void *), const void *arg)
{
	yajl_gen g = yajl_gen_alloc(NULL);

	if (!g) {
		o->oom = 1;
		return;
	}
	yajl_gen_config(g, yajl_gen_print_callback, gen_print, o);
	yajl_gen_config(g, yajl_gen_validate_utf8, 1);
	gen(g, arg);
	yajl_gen_free(g);
}

static void gen_value_cb(yajl_gen g, const void *v)
{
	gen_value(g, (yajl_val)v);
}

static void gen_string_cb(yajl_gen g, const void *s)
{
	gen_string(g, s);
}

void out_value(struct out *o, yajl_val v)
{
	out_gen(o, gen_value_cb, v);
}

void out_jstr(struct out *o, const char *s)
{
	out_gen(o, gen_string_cb, s);
}

/*
 * The tree: yajl's streaming parser calls back for each value and the
 * builder below makes yajl_val nodes in one arena, so a request costs a
 * few allocations instead of two per value (yajl_tree_parse's malloc per
 * node and string were a third of the server's time on exists), and the
 * parse is strict (yajl_tree_parse turns comments on). Children of the
 * open containers wait on one scratch stack (kids); a closing bracket
 * moves its run of children into the arena.
 */
struct chunk {
	struct chunk *next;
	size_t used, cap;
	alignas(max_align_t) char data[];
};

struct tree {
	struct chunk *chunks;
	struct child {
		yajl_val v;
		const char *key; /* in an object */
	} * kids;                /* children of the open containers, in order */
	struct frame {
		yajl_val owner;
		size_t from; /* where its children start in kids */
	} * open;            /* the open containers, outermost first */
	size_t top, kids_cap, depth, open_cap;
	const char *key; /* the key of the next value, in an object */
	yajl_val root;
	int nul; /* a string held \u0000 */
	int oom;
	yajl_handle h; /* for the offset where the root value ends */
	size_t end;
	const char *text; /* the body */
	size_t len;
};

/* Whether s[0..len) holds a NUL. In a slice of the body a NUL (a control
 * character) never gets past yajl's lexer: only a decoded string (with
 * escapes) needs looking at. */
static int has_nul(const struct tree *t, const unsigned char *s, size_t len)
{
	return !body_slice(t->text, t->len, s, len) && memchr(s, 0, len) != NULL;
}

size_t body_not_json(const char *text, size_t len)
{
	const char *vt = memchr(text, '\v', len), *ff = memchr(text, '\f', len);
	size_t at = utf8_end((const unsigned char *)text, len), sur = surrogate_end(text, len);

	if (sur < at)
		at = sur;
	if (vt && (size_t)(vt - text) < at)
		at = (size_t)(vt - text);
	if (ff && (size_t)(ff - text) < at)
		at = (size_t)(ff - text);
	return at;
}

size_t body_trailing(const char *text, size_t from, size_t len)
{
	for (size_t i = from; i < len; i++)
		if (text[i] == '\0' || !strchr(" \t\n\r", text[i]))
			return i;
	return len;
}

static void *arena(struct tree *t, size_t n)
{
	struct chunk *c = t->chunks;

	n = (n + 15) & ~(size_t)15;
	if (!c || c->cap - c->used < n) {
		size_t cap = n > 65536 ? n : 65536;
		if (!(c = malloc(sizeof(*c) + cap))) {
			t->oom = 1;
			return NULL;
		}
		c->used = 0;
		c->cap = cap;
		c->next = t->chunks;
		t->chunks = c;
	}
	void *p = c->data + c->used;
	c->used += n;
	return p;
}

static char *arena_str(struct tree *t, const unsigned char *s, size_t len)
{
	char *d = arena(t, len + 1);
	if (d) {
		memcpy(d, s, len);
		d[len] = '\0';
	}
	return d;
}

int body_grow(void **v, size_t *cap, size_t need, size_t size)
{
	if (need <= *cap)
		return 0;
	size_t c = *cap ? *cap * 2 : 256;
	while (c < need)
		c *= 2;
	void *n = realloc(*v, c * size);
	if (!n)
		return -1;
	*v = n;
	*cap = c;
	return 0;
}

/* Places a finished value: the root, or the next child of the open container. */
static int put(struct tree *t, yajl_val v)
{
	if (!v)
		return 0;
	if (t->depth == 0) {
		t->root = v;
		t->end = yajl_get_bytes_consumed(t->h);
		return 1;
	}
	if (body_grow((void **)&t->kids, &t->kids_cap, t->top + 1, sizeof(*t->kids)) < 0) {
		t->oom = 1;
		return 0;
	}
	t->kids[t->top++] = (struct child){v, t->key};
	t->key = NULL;
	return 1;
}

static yajl_val node(struct tree *t, yajl_type type)
{
	yajl_val v = arena(t, sizeof(*v));
	if (v) {
		memset(v, 0, sizeof(*v));
		v->type = type;
	}
	return v;
}

static int on_null(void *ctx)
{
	return put(ctx, node(ctx, yajl_t_null));
}

static int on_bool(void *ctx, int b)
{
	return put(ctx, node(ctx, b ? yajl_t_true : yajl_t_false));
}

static int on_number(void *ctx, const char *s, size_t len)
{
	struct tree *t = ctx;
	yajl_val v = node(t, yajl_t_number);
	char *end;

	if (!v || !(v->u.number.r = arena_str(t, (const unsigned char *)s, len)))
		return put(t, NULL);
	errno = 0;
	v->u.number.i = strtoll(v->u.number.r, &end, 10);
	if (errno == 0 && *end == '\0')
		v->u.number.flags |= YAJL_NUMBER_INT_VALID;
	errno = 0;
	v->u.number.d = strtod(v->u.number.r, &end);
	if (errno == 0 && *end == '\0')
		v->u.number.flags |= YAJL_NUMBER_DOUBLE_VALID;
	return put(t, v);
}

/* Keys travel as C strings: a "\u0000" inside one is refused, not cut. */
static int on_string(void *ctx, const unsigned char *s, size_t len)
{
	struct tree *t = ctx;
	yajl_val v;

	if (has_nul(t, s, len)) {
		t->nul = 1;
		return 0;
	}
	if (!(v = node(t, yajl_t_string)) || !(v->u.string = arena_str(t, s, len)))
		return put(t, NULL);
	return put(t, v);
}

static int on_key(void *ctx, const unsigned char *s, size_t len)
{
	struct tree *t = ctx;

	if (has_nul(t, s, len)) {
		t->nul = 1;
		return 0;
	}
	t->key = arena_str(t, s, len);
	return t->key != NULL;
}

static int open_container(struct tree *t, yajl_type type)
{
	yajl_val v = node(t, type);

	if (!v || body_grow((void **)&t->open, &t->open_cap, t->depth + 1, sizeof(*t->open)) < 0) {
		t->oom = 1;
		return 0;
	}
	/* placed now, with its key (its children set t->key again); its
	 * children are filled in when it closes */
	if (!put(t, v))
		return 0;
	t->open[t->depth++] = (struct frame){v, t->top};
	return 1;
}

static int close_container(void *ctx)
{
	struct tree *t = ctx;
	struct frame f = t->open[--t->depth];
	size_t n = t->top - f.from;
	yajl_val v = f.owner;
	// NOLINTNEXTLINE(bugprone-sizeof-expression): an array of pointers, sizeof(*p) meant
	yajl_val *vals = arena(t, (n ? n : 1) * sizeof(*vals));

	if (!vals)
		return 0;
	for (size_t i = 0; i < n; i++)
		vals[i] = t->kids[f.from + i].v;
	if (v->type == yajl_t_object) {
		const char **keys = arena(t, (n ? n : 1) * sizeof(*keys));
		if (!keys)
			return 0;
		for (size_t i = 0; i < n; i++)
			keys[i] = t->kids[f.from + i].key;
		v->u.object.keys = keys;
		v->u.object.values = vals;
		v->u.object.len = n;
	} else {
		v->u.array.values = vals;
		v->u.array.len = n;
	}
	t->top = f.from;
	if (t->depth == 0)
		t->end = yajl_get_bytes_consumed(t->h);
	return 1;
}

static int on_start_map(void *ctx)
{
	return open_container(ctx, yajl_t_object);
}

static int on_start_array(void *ctx)
{
	return open_container(ctx, yajl_t_array);
}

static const yajl_callbacks tree_cb = {
	.yajl_null = on_null,
	.yajl_boolean = on_bool,
	.yajl_number = on_number,
	.yajl_string = on_string,
	.yajl_start_map = on_start_map,
	.yajl_map_key = on_key,
	.yajl_end_map = close_container,
	.yajl_start_array = on_start_array,
	.yajl_end_array = close_container,
};

static void free_chunks(struct chunk *c)
{
	while (c) {
		struct chunk *next = c->next;
		free(c);
		c = next;
	}
}

/* A parsed tree: its root, with the arena that holds it in front. */
struct body_tree {
	struct chunk *chunks;
	struct yajl_val_s root;
};

yajl_val body_parse(const char *text, size_t len, char *err, size_t errlen, size_t *pos)
{
	if ((*pos = body_not_json(text, len)) < len) {
		snprintf(err, errlen, "%s",
		         text[*pos] == '\v' || text[*pos] == '\f'
		                 ? "lexical error: invalid char in json text"
		         : text[*pos] == '\\'
		                 ? "lexical error: a \\u escape of a surrogate not in a pair"
		                 : "lexical error: invalid bytes in UTF8 string.");
		return NULL;
	}

	struct tree t = {.text = text, .len = len};
	yajl_handle h = yajl_alloc(&tree_cb, NULL, &t);
	yajl_status st = yajl_status_error;

	int trailing = 0;
	t.h = h;
	if (h) {
		st = yajl_parse(h, (const unsigned char *)text, len);
		*pos = yajl_get_bytes_consumed(h);
		if (st == yajl_status_ok) {
			st = yajl_complete_parse(h);
			*pos = len; /* what is missing is missing at the end */
		}
	}
	size_t junk = st == yajl_status_ok && t.root ? body_trailing(text, t.end, len) : len;
	if (junk < len) {
		trailing = 1;
		*pos = junk;
		st = yajl_status_error;
	}
	struct body_tree *bt = NULL;
	if (st == yajl_status_ok && !t.oom && t.root && (bt = arena(&t, sizeof(*bt)))) {
		/* the tree owns its arena: a header in front of a copy of the root */
		bt->root = *t.root;
		bt->chunks = t.chunks;
		t.chunks = NULL;
	} else if (!h || t.oom || st == yajl_status_ok) {
		snprintf(err, errlen, "out of memory");
	} else if (t.nul) {
		snprintf(err, errlen, "a string holds \\u0000");
	} else if (trailing) {
		snprintf(err, errlen, "parse error: trailing garbage");
	} else {
		unsigned char *e = yajl_get_error(h, 0, (const unsigned char *)text, len);
		snprintf(err, errlen, "%s", e ? (const char *)e : "invalid JSON");
		/* "parse error: premature EOF" and the like end in newlines */
		err[strcspn(err, "\n")] = '\0';
		if (e)
			yajl_free_error(h, e);
	}
	if (h)
		yajl_free(h);
	free_chunks(t.chunks);
	free(t.kids);
	free(t.open);
	return bt ? &bt->root : NULL;
}

void body_free(yajl_val v)
{
	if (v)
		free_chunks(((struct body_tree *)((char *)v - offsetof(struct body_tree, root)))
		                    ->chunks);
}

yajl_val body_field(yajl_val obj, const char *field)
{
	if (!YAJL_IS_OBJECT(obj))
		return NULL;
	for (size_t i = obj->u.object.len; i-- > 0;)
		if (strcmp(obj->u.object.keys[i], field) == 0)
			return obj->u.object.values[i];
	return NULL;
}
