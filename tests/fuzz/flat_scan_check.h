/*
 * flat_scan_check.h - whether the scan (the first tier of the fast paths,
 * serve/flat_scan.c) reads a body as the copy (the second tier, flat.c and
 * flat_write.c) reads it: a body the scan takes, the copy takes too, with
 * the same keys, indices, releases and namespace at the same places, and
 * the text changed alike; a body the scan leaves, it leaves untouched.
 * Together with flat_write_check.h and the routes compared against
 * body_parse, every body taken by either tier is read as body_parse
 * reads it. Used by test_serve.c and fuzz_serve.c.
 */
#ifndef PAGEFS_TESTS_FLAT_SCAN_CHECK_H
#define PAGEFS_TESTS_FLAT_SCAN_CHECK_H

#include "serve/flat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The body kinds: a key list, a reserve, a confirm. */
enum fsc_kind { FSC_KEYS, FSC_RESERVE, FSC_CONFIRM };

/* Offsets of the keys and the namespace in their text, -1 for none. */
static inline int fsc_same_places(const char *a_text, const char *const *a, const char *a_ns,
                                  const char *b_text, const char *const *b, const char *b_ns,
                                  size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (a[i] - a_text != b[i] - b_text)
			return 0;
	return (a_ns ? a_ns - a_text : -1) == (b_ns ? b_ns - b_text : -1);
}

/*
 * Runs both tiers on copies of body[0..len) with max_keys; 0 when they
 * agree as above, else -1 with what differs in why. *taken: whether the
 * scan took it. A tier that ran out of memory is not checked.
 */
static inline int flat_scan_check(const char *body, size_t len, enum fsc_kind kind, size_t max_keys,
                                  int *taken, char *why, size_t whylen)
{
	char *a = malloc(len + 1), *b = malloc(len + 1);
	int bad = 0;

	*taken = 0;
	if (!a || !b) {
		free(a);
		free(b);
		return 0;
	}
	memcpy(a, body, len);
	memcpy(b, body, len);
	a[len] = b[len] = '\0';
	if (kind == FSC_KEYS) {
		struct flat fa, fb;
		int ra = flat_scan(a, len, max_keys, &fa),
		    rb = ra == 0 ? flat_parse_copy(b, len, max_keys, &fb) : 1;
		*taken = ra == 0;
		if (ra == 1 && memcmp(a, body, len) != 0) {
			snprintf(why, whylen, "left by the scan, but changed");
			bad = 1;
		} else if (ra == 0 && rb == 1) {
			snprintf(why, whylen, "taken by the scan (%zu keys), left by the copy",
			         fa.n);
			bad = 1;
		} else if (ra == 0 && rb == 0 &&
		           (fa.n != fb.n || memcmp(a, b, len) != 0 ||
		            !fsc_same_places(a, fa.keys, fa.ns, b, fb.keys, fb.ns, fa.n))) {
			snprintf(why, whylen,
			         "read otherwise: %zu keys by the scan, %zu by the copy", fa.n,
			         fb.n);
			bad = 1;
		}
		if (ra == 0)
			flat_free(&fa);
		if (ra == 0 && rb == 0)
			flat_free(&fb);
	} else {
		int confirm = kind == FSC_CONFIRM;
		struct flat_write wa, wb;
		int ra = flat_scan_write(a, len, confirm, max_keys, &wa);
		int rb = ra == 0 ? flat_parse_write_copy(b, len, confirm, max_keys, &wb) : 1;
		*taken = ra == 0;
		if (ra == 1 && memcmp(a, body, len) != 0) {
			snprintf(why, whylen, "left by the scan, but changed");
			bad = 1;
		} else if (ra == 0 && rb == 1) {
			snprintf(why, whylen, "taken by the scan (%zu pairs), left by the copy",
			         wa.n);
			bad = 1;
		} else if (ra == 0 && rb == 0) {
			int same = wa.n == wb.n && wa.nrel == wb.nrel && memcmp(a, b, len) == 0 &&
			           fsc_same_places(a, wa.keys, wa.ns, b, wb.keys, wb.ns, wa.n) &&
			           (!confirm || !wa.n ||
			            memcmp(wa.slots, wb.slots, wa.n * sizeof(*wa.slots)) == 0) &&
			           (!wa.nrel || memcmp(wa.release, wb.release,
			                               wa.nrel * sizeof(*wa.release)) == 0);
			if (!same) {
				snprintf(why, whylen,
				         "read otherwise: %zu pairs and %zu releases by the scan, "
				         "%zu and %zu by the copy",
				         wa.n, wa.nrel, wb.n, wb.nrel);
				bad = 1;
			}
		}
		if (ra == 0)
			flat_write_free(&wa);
		if (ra == 0 && rb == 0)
			flat_write_free(&wb);
	}
	free(a);
	free(b);
	return bad ? -1 : 0;
}

#endif
