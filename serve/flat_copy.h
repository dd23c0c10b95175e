/*
 * flat_copy.h - what the fast paths for request bodies share (flat.c for
 * key lists, flat_write.c for reserve and confirm): the body with its
 * printable strings emptied, for yajl to parse quickly, and where each
 * string of the body lies. flat_copy.c says how.
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
 * take and the callbacks took it all, 1 if not, -ENOMEM. A callback for
 * the end of the root calls copy_root_ended.
 */
int copy_parse(struct copy *c, const char *text, size_t len, const yajl_callbacks *cb, void *ctx);
void copy_root_ended(struct copy *c);

/* The strings of the body the string yajl reports now stands for, from
 * *first on, or 0 if there are none. */
size_t copy_next(struct copy *c, const struct span **first);

#endif
