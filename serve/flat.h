/*
 * flat.h - the fast path for the key-list bodies of exists,
 * get_page_indices and delete_keys: {"keys": ["k", ...]} with an optional
 * "namespace" string, the shape every SGLang client sends.
 */
#ifndef PAGEFS_SERVE_FLAT_H
#define PAGEFS_SERVE_FLAT_H

#include <stddef.h>

/* A key-list body: keys[0..n) and ns point into the body itself. */
struct flat {
	const char **keys;
	size_t n;
	const char *ns; /* NULL: no "namespace" field */
};

/*
 * Parses text[0..len) if it is a key-list body in its plainest form: one
 * object with a "keys" array of strings and at most a "namespace" string,
 * each field once, no escapes in any string, at most max_keys keys. Then
 * ends every string in place with a NUL (over its closing quote: text is
 * changed) and returns 0. Returns 1, text untouched, for anything else, be
 * it malformed or only unusual: the caller parses it the general way
 * (body_parse), which answers it or says what is wrong with it, so that
 * both ways give the same reply. -ENOMEM if out of memory. Free with
 * flat_free.
 */
int flat_parse(char *text, size_t len, size_t max_keys, struct flat *f);
void flat_free(struct flat *f);

#endif
