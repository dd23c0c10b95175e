/*
 * flat.h - the fast paths for the bodies every SGLang client sends: the key
 * lists of exists, get_page_indices and delete_keys ({"keys": ["k", ...]}
 * with an optional "namespace" string), and the writes of
 * reserve_and_allocate_page_indices and confirm_write.
 *
 * Two tiers, tried in turn before the general parse (body_parse): a scan
 * of the body exactly as SGLang sends it, strings of printable ASCII and
 * integer indices, in one pass with no copy and no yajl (flat_scan.c);
 * then yajl over a copy of the body with its printable strings emptied,
 * which also takes strings of other bytes (flat.c, flat_write.c). What
 * the scan takes the copy takes too, read alike; the tests check both.
 */
#ifndef PAGEFS_SERVE_FLAT_H
#define PAGEFS_SERVE_FLAT_H

#include <stddef.h>
#include <stdint.h>

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

/* flat_parse's tiers: the scan (flat_scan.c), the copy (flat.c). Each
 * returns as flat_parse does; 1 from the scan says only that the body is
 * not in the form it reads. */
int flat_scan(char *text, size_t len, size_t max_keys, struct flat *f);
int flat_parse_copy(char *text, size_t len, size_t max_keys, struct flat *f);

/* A write body (flat_write.c): keys[0..n) and ns point into the body. */
struct flat_write {
	const char **keys;
	size_t n;
	int64_t *slots;   /* confirm: the index written for each key */
	int64_t *release; /* confirm: pages_to_release[0..nrel) */
	size_t nrel;
	const char *ns; /* NULL: no "namespace" field */
};

/*
 * As flat_parse, for a write: with confirm 0, reserve's body in its
 * plainest form ({"keys": [[key, prefix_key], ...]}, both strings); with
 * confirm 1, confirm_write's ({"written_keys_to_confirm": [[key, index],
 * ...]} and an optional "pages_to_release": [index, ...], indices plain
 * integers of at most 18 digits); either with an optional "namespace",
 * each field once, no escapes, at most max_keys pairs and max_keys
 * indices to release. 0 (each key and ns ended in place), 1 (text
 * untouched: the caller parses it the general way) or -ENOMEM. Free with
 * flat_write_free.
 */
int flat_parse_write(char *text, size_t len, int confirm, size_t max_keys, struct flat_write *w);
void flat_write_free(struct flat_write *w);

/* flat_parse_write's tiers, as flat_parse's. */
int flat_scan_write(char *text, size_t len, int confirm, size_t max_keys, struct flat_write *w);
int flat_parse_write_copy(char *text, size_t len, int confirm, size_t max_keys,
                          struct flat_write *w);

#endif
