/*
 * body.h - a request body as a JSON tree (yajl), and the JSON text of
 * replies. serve.c asks it for fields; it knows nothing of the routes.
 */
#ifndef PAGEFS_SERVE_BODY_H
#define PAGEFS_SERVE_BODY_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <yajl/yajl_tree.h>

/* A growing reply text. oom is set (and the text dropped) on ENOMEM. */
struct out {
	unsigned status;
	char *buf;
	size_t len, cap;
	int oom;
	const char *type; /* Content-Type; NULL: application/json */
};

/* Room for n more bytes, allocated now. */
void out_reserve(struct out *o, size_t n);

/* Inline, as out_str: a batch reply appends a few bytes per key, of a
 * length known where they are written. */
static inline void out_add(struct out *o, const char *s, size_t n)
{
	if (o->len + n + 1 > o->cap)
		out_reserve(o, n);
	if (o->oom)
		return;
	memcpy(o->buf + o->len, s, n);
	o->len += n;
	o->buf[o->len] = '\0';
}

static inline void out_str(struct out *o, const char *s)
{
	out_add(o, s, strlen(s));
}
/* Appends v in decimal (the batch replies' slots: printf cost a tenth of
 * a get reply's CPU). */
void out_int(struct out *o, long long v);
__attribute__((format(printf, 2, 3))) void out_fmt(struct out *o, const char *fmt, ...);
/* Appends v as compact JSON (strings escaped); a NULL v is null. */
void out_value(struct out *o, yajl_val v);
/* Appends s as a JSON string. */
void out_jstr(struct out *o, const char *s);

/* The checks strict JSON needs beyond yajl's. body_not_json: the offset
 * in text[0..len) of the first \v or \f (yajl's white space, not JSON's;
 * inside a string yajl refuses them), of the first byte that does not
 * begin UTF-8 as RFC 3629 has it (yajl takes overlong forms, surrogates
 * and code points past U+10FFFF; Python's parser refuses the first and
 * the last), or of a \u escape of a surrogate not in a pair (yajl mangles
 * it); len if none. body_trailing: the offset of the first byte from
 * `from` on that is not JSON white space (what may follow the root value:
 * yajl leaves an unfinished token such as a lone '"' unread), or len. */
size_t body_not_json(const char *text, size_t len);
size_t body_trailing(const char *text, size_t from, size_t len);

/* Makes *v (an array of *cap elements of size bytes, malloc'd or NULL)
 * hold at least need elements, doubling from 256. 0, or -1 if out of
 * memory (*v and *cap are then as they were). */
int body_grow(void **v, size_t *cap, size_t need, size_t size);

/* Whether s[0..n) is a slice of text[0..len) followed by at least one more
 * byte: how yajl hands over a string without escapes (then the byte after
 * is its closing quote); a decoded string lies elsewhere. */
static inline int body_slice(const char *text, size_t len, const void *s, size_t n)
{
	uintptr_t a = (uintptr_t)s, t = (uintptr_t)text;
	return a >= t && a + n < t + len;
}

/*
 * Parses text[0..len) as strict JSON: no comments, UTF-8 checked, no NUL
 * inside strings (keys are C strings). Returns the tree (free it with
 * body_free, not yajl_tree_free) or NULL with yajl's message in err and
 * the byte offset of the error in *pos.
 */
yajl_val body_parse(const char *text, size_t len, char *err, size_t errlen, size_t *pos);
void body_free(yajl_val v);

/* The value of field in object obj (the last one if repeated, as Python's
 * dict keeps), or NULL. */
yajl_val body_field(yajl_val obj, const char *field);

#endif
