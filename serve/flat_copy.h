/*
 * flat_copy.h - what the fast paths for request bodies share (flat.c for
 * key lists, flat_write.c for reserve and confirm): the body with its
 * printable strings emptied, for yajl to parse quickly, and where each
 * string of the body lies. flat_copy.c says how. The scan for a string's
 * end (flat_string_len) serves the first tier, flat_scan.c, too.
 */
#ifndef PAGEFS_SERVE_FLAT_COPY_H
#define PAGEFS_SERVE_FLAT_COPY_H

#include <stddef.h>
#include <stdint.h>
#include <yajl/yajl_parse.h>

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

/* What flat_string_len found in a string. */
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
size_t flat_string_len(const char *s, size_t room, enum string_kind *kind);

/* The digits of an index the fast paths take: any value of at most 18
 * digits fits an int64_t; longer ones go to body_parse, which knows the
 * limits. */
#define FLAT_INDEX_DIGITS_MAX 18

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
	size_t next;     /* the next string's index in tokens (copy_next) */
	yajl_handle h;   /* while copy_parse runs */
	size_t root_end; /* offset in text just past the root's end */
};

/*
 * Makes c from the body text[0..len): 0, or 1 if the body is not for a
 * fast path (a backslash, a quote that is not closed, a bracket that
 * closes nothing, nesting over COPY_DEPTH, more than max_strings strings,
 * 4 GiB or more), or -ENOMEM. Free with copy_free in every case.
 */
int copy_make(const char *text, size_t len, size_t max_strings, struct copy *c);
void copy_free(struct copy *c);

/*
 * Has yajl parse the copy with cb (ctx their context) and checks what
 * body_parse checks around yajl: 0 if it is JSON that body_parse would
 * take and the callbacks took it all, 1 if not, -ENOMEM. cb's end of a
 * map is copy_end_root, and ctx starts with a struct copy_root.
 */
int copy_parse(struct copy *c, const char *text, size_t len, const yajl_callbacks *cb, void *ctx);

/* The strings of the body the string yajl reports now stands for, from
 * *first on, or 0 if there are none. */
size_t copy_next(struct copy *c, const struct span **first);

/* copy_next for a string (or object key) yajl reported with copied_len
 * bytes: 0 also unless it is an emptied string or one yajl had whole, as
 * it stands in the body. */
size_t copy_next_string(struct copy *c, size_t copied_len, const struct span **first);

/* Whether the body's string sp is name. */
int copy_is(const struct copy *c, const struct span *sp, const char *name);

/*
 * What the fast paths' yajl callbacks share. Their state starts with a
 * struct copy_root: the copy, and how deep the parse is (0: outside the
 * root, 1: in the root object). copy_start_root and copy_end_root are the
 * callbacks for the root object (no other object is taken); copy_refuse
 * and copy_refuse_bool for values no fast path takes (yajl stops, the
 * caller takes the general way).
 */
struct copy_root {
	struct copy *copy;
	int depth;
};
int copy_start_root(void *ctx);
int copy_end_root(void *ctx);
int copy_refuse(void *ctx);
int copy_refuse_bool(void *ctx, int b);

#endif
