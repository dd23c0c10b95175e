/*
 * flat_write_check.h - whether the fast path for write bodies
 * (flat_parse_write, serve/flat_write.c) read a body as the general parse
 * (body_parse) reads it. A reserve changes what the next one answers, so
 * replies of the two ways cannot be compared on one index as those of
 * exists can; their inputs can. Used by test_serve.c and fuzz_serve.c.
 */
#ifndef PAGEFS_TESTS_FLAT_WRITE_CHECK_H
#define PAGEFS_TESTS_FLAT_WRITE_CHECK_H

#include "serve/body.h"
#include "serve/flat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* yajl_val v is the string s. */
static inline int fwc_string_is(yajl_val v, const char *s)
{
	return v && YAJL_IS_STRING(v) && strcmp(v->u.string, s) == 0;
}

/* yajl_val v is the integer i. */
static inline int fwc_int_is(yajl_val v, int64_t i)
{
	return v && YAJL_IS_INTEGER(v) && YAJL_GET_INTEGER(v) == i;
}

/*
 * Runs flat_parse_write(confirm, max_keys) on a copy of body[0..len) and
 * checks it against body_parse. Returns 0 when all is well: the fast path
 * left the body to body_parse with its bytes untouched, or took it and
 * body_parse reads the same keys, indices, releases and namespace from
 * it. Otherwise -1, with what differs in why. *taken: whether the fast
 * path took it. Equal reads mean equal replies only with max_keys at most
 * SERVE_MAX_KEYS (the routes' limit, past which they answer 413; not
 * checked here). A parse that ran out of memory is not checked.
 */
static inline int flat_write_check(const char *body, size_t len, int confirm, size_t max_keys,
                                   int *taken, char *why, size_t whylen)
{
	char *copy = malloc(len + 1);
	struct flat_write w;
	int bad = 0;

	*taken = 0;
	if (!copy)
		return 0; /* out of memory: nothing to check */
	memcpy(copy, body, len);
	copy[len] = '\0';
	int rc = flat_parse_write(copy, len, confirm, max_keys, &w);
	if (rc != 0) {
		if (rc == 1 && memcmp(copy, body, len) != 0) {
			snprintf(why, whylen, "left to body_parse, but changed");
			bad = 1;
		}
		free(copy);
		return bad ? -1 : 0;
	}
	*taken = 1;
	char err[160];
	size_t pos;
	yajl_val data = body_parse(body, len, err, sizeof(err), &pos);
	yajl_val list = data && YAJL_IS_OBJECT(data)
	                        ? body_field(data, confirm ? "written_keys_to_confirm" : "keys")
	                        : NULL;
	yajl_val ns = data && YAJL_IS_OBJECT(data) ? body_field(data, "namespace") : NULL;
	yajl_val rel = data && YAJL_IS_OBJECT(data) && confirm
	                       ? body_field(data, "pages_to_release")
	                       : NULL;
	if (!list || !YAJL_IS_ARRAY(list) || list->u.array.len != w.n) {
		snprintf(why, whylen, "taken with %zu pairs, which body_parse does not read", w.n);
		bad = 1;
	}
	for (size_t i = 0; !bad && i < w.n; i++) {
		yajl_val e = list->u.array.values[i];
		if (!YAJL_IS_ARRAY(e) || e->u.array.len != 2 ||
		    !fwc_string_is(e->u.array.values[0], w.keys[i]) ||
		    (confirm ? !fwc_int_is(e->u.array.values[1], w.slots[i])
		             : !YAJL_IS_STRING(e->u.array.values[1]))) {
			snprintf(why, whylen, "pair %zu: key %s, read otherwise by body_parse", i,
			         w.keys[i]);
			bad = 1;
		}
	}
	if (!bad && (w.ns ? !fwc_string_is(ns, w.ns) : ns != NULL)) {
		snprintf(why, whylen, "namespace %s, read otherwise by body_parse",
		         w.ns ? w.ns : "(none)");
		bad = 1;
	}
	if (!bad && confirm &&
	    (rel ? !YAJL_IS_ARRAY(rel) || rel->u.array.len != w.nrel : w.nrel != 0)) {
		snprintf(why, whylen, "%zu pages to release, read otherwise by body_parse", w.nrel);
		bad = 1;
	}
	for (size_t i = 0; !bad && rel && i < w.nrel; i++) {
		if (!fwc_int_is(rel->u.array.values[i], w.release[i])) {
			snprintf(why, whylen,
			         "page to release %zu: %lld, read otherwise by body_parse", i,
			         (long long)w.release[i]);
			bad = 1;
		}
	}
	if (data)
		body_free(data);
	flat_write_free(&w);
	free(copy);
	return bad ? -1 : 0;
}

#endif
