/*
 * flat_scan.c - the first tier of the fast paths for request bodies
 * (flat.h): the bodies of SGLang's clients as they send them, read in one
 * pass over the text, with no copy of it and no yajl, and flat_parse and
 * flat_parse_write, which try this tier and then the copy (flat.c,
 * flat_write.c).
 *
 * What is read here is a strict part of JSON: white space of the four
 * characters JSON allows (body_parse refuses \v and \f, which yajl would
 * take), strings of printable ASCII with no backslash (flat_string_len,
 * sixteen bytes at a time), integers of at most 18 digits with no leading
 * zero, and the objects and arrays of the bodies' fields, each field
 * once. Any other byte where one of these is expected ends the scan with
 * 1 and the text untouched, and the copy then reads the body: whatever
 * is taken here is JSON that both the copy and body_parse take, and read
 * as they read it (tests/fuzz/flat_scan_check.h checks that on every body
 * the tests and fuzz_serve make).
 */
#include "serve/body.h"
#include "serve/flat.h"
#include "serve/flat_copy.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Where the scan is in the body. */
struct scan {
	char *p, *end;
};

/* A string of the body: text[at, at + len). */
struct str {
	char *at;
	size_t len;
};

static void skip_space(struct scan *s)
{
	while (s->p < s->end && (*s->p == ' ' || *s->p == '\n' || *s->p == '\t' || *s->p == '\r'))
		s->p++;
}

/* Whether c comes next (after white space); if so, passes it. */
static int eat(struct scan *s, char c)
{
	skip_space(s);
	if (s->p < s->end && *s->p == c) {
		s->p++;
		return 1;
	}
	return 0;
}

/* A string of printable ASCII: 0 (in *out, passed), or 1. */
static int string(struct scan *s, struct str *out)
{
	enum string_kind kind;

	if (!eat(s, '"'))
		return 1;
	size_t n = flat_string_len(s->p, (size_t)(s->end - s->p), &kind);
	if (kind != STRING_PLAIN) /* other bytes, a backslash, or no end */
		return 1;
	*out = (struct str){s->p, n};
	s->p += n + 1;
	return 0;
}

static int is(const struct str *a, const char *name)
{
	size_t n = strlen(name);

	return a->len == n && memcmp(a->at, name, n) == 0;
}

/* An integer in JSON's form, without fraction or exponent, of at most
 * FLAT_INDEX_DIGITS_MAX digits: 0 (in *out, passed), or 1. What follows
 * it is the caller's to check: a '.' or an 'e' is then not what it
 * expects. */
static int index_of(struct scan *s, int64_t *out)
{
	skip_space(s);
	char *q = s->p;
	int neg = q < s->end && *q == '-';
	const char *digits = q += neg;
	int64_t v = 0;

	while (q < s->end && *q >= '0' && *q <= '9') {
		if (q - digits == FLAT_INDEX_DIGITS_MAX)
			return 1;
		v = v * 10 + (*q++ - '0');
	}
	if (q == digits || (*digits == '0' && q - digits > 1))
		return 1; /* no digit, or a leading zero: not JSON */
	*out = neg ? -v : v;
	s->p = q;
	return 0;
}

/* Ends each of strs[0..n) in place (over its closing quote) and puts its
 * start in out[i]. */
static void end_strings(const struct str *strs, size_t n, const char **out)
{
	for (size_t i = 0; i < n; i++) {
		strs[i].at[strs[i].len] = '\0';
		out[i] = strs[i].at;
	}
}

/* What follows the root: white space to the end, or 1. */
static int root_ends(struct scan *s)
{
	skip_space(s);
	return s->p == s->end ? 0 : 1;
}

/* The fields of the body being read; the lists grow as they are read. */
struct fields {
	struct str *keys;
	size_t nkeys, cap_keys;
	int64_t *slots, *release;
	size_t nrel, cap_slots, cap_release;
	struct str ns;
	int has_keys, has_ns, has_release, oom;
};

static void fields_free(struct fields *f)
{
	free(f->keys);
	free(f->slots);
	free(f->release);
}

/* Room for one more item in v (*cap of size bytes, n used). 0, or 1
 * with oom noted. */
static int room(struct fields *f, void **v, size_t *cap, size_t n, size_t size)
{
	if (body_grow(v, cap, n + 1, size) < 0) {
		f->oom = 1;
		return 1;
	}
	return 0;
}

/* What a list of the body holds. */
enum item { ITEM_KEY, ITEM_RESERVE_PAIR, ITEM_CONFIRM_PAIR, ITEM_INDEX };

/* One item of a list, stored at f's next key (and index) or index to
 * release: a key "k"; a reserve's pair [key, prefix]; a confirm's pair
 * [key, index]; an index to release. 0 or 1. */
static int item(struct scan *s, enum item it, struct fields *f)
{
	struct str prefix;

	if (it == ITEM_INDEX)
		return room(f, (void **)&f->release, &f->cap_release, f->nrel,
		            sizeof(*f->release)) ||
		       index_of(s, &f->release[f->nrel]);
	if (room(f, (void **)&f->keys, &f->cap_keys, f->nkeys, sizeof(*f->keys)))
		return 1;
	if (it == ITEM_KEY)
		return string(s, &f->keys[f->nkeys]);
	if (it == ITEM_CONFIRM_PAIR &&
	    room(f, (void **)&f->slots, &f->cap_slots, f->nkeys, sizeof(*f->slots)))
		return 1;
	return !eat(s, '[') || string(s, &f->keys[f->nkeys]) || !eat(s, ',') ||
	       (it == ITEM_CONFIRM_PAIR ? index_of(s, &f->slots[f->nkeys]) : string(s, &prefix)) ||
	       !eat(s, ']');
}

/* A list of at most max items: [item, ...]. 0 or 1. */
static int scan_list(struct scan *s, enum item it, size_t max, struct fields *f)
{
	size_t *n = it == ITEM_INDEX ? &f->nrel : &f->nkeys;

	if (!eat(s, '['))
		return 1;
	if (eat(s, ']'))
		return 0;
	do {
		if (*n == max || item(s, it, f))
			return 1;
		(*n)++;
	} while (eat(s, ','));
	return eat(s, ']') ? 0 : 1;
}

/* The kind of body read: a key list, a reserve or a confirm. */
enum body_kind { KEY_LIST, RESERVE, CONFIRM };

/* The root object of a body of this kind, and the end of the text. 0, 1,
 * or -ENOMEM. */
static int scan_body(char *text, size_t len, enum body_kind kind, size_t max, struct fields *f)
{
	struct scan s = {text, text + len};
	const char *list = kind == CONFIRM ? "written_keys_to_confirm" : "keys";

	if (len >= UINT32_MAX || !eat(&s, '{'))
		return 1; /* (the copy's limit: what is taken here, it takes) */
	do {
		struct str name;
		int rc;
		if (string(&s, &name) || !eat(&s, ':'))
			return 1;
		if (is(&name, list) && !f->has_keys) {
			f->has_keys = 1;
			rc = scan_list(&s,
			               kind == KEY_LIST  ? ITEM_KEY
			               : kind == CONFIRM ? ITEM_CONFIRM_PAIR
			                                 : ITEM_RESERVE_PAIR,
			               max, f);
		} else if (kind == CONFIRM && is(&name, "pages_to_release") && !f->has_release) {
			f->has_release = 1;
			rc = scan_list(&s, ITEM_INDEX, max, f);
		} else if (is(&name, "namespace") && !f->has_ns) {
			f->has_ns = 1;
			rc = string(&s, &f->ns);
		} else {
			rc = 1;
		}
		if (rc)
			return f->oom ? -ENOMEM : 1;
	} while (eat(&s, ','));
	/* a body without its list: the general parse's defaults and errors */
	return eat(&s, '}') && root_ends(&s) == 0 && f->has_keys ? 0 : 1;
}

int flat_scan(char *text, size_t len, size_t max_keys, struct flat *out)
{
	struct fields f = {0};
	int rc = scan_body(text, len, KEY_LIST, max_keys, &f);

	memset(out, 0, sizeof(*out));
	if (rc == 0 && f.nkeys && !(out->keys = malloc(f.nkeys * sizeof(*out->keys))))
		rc = -ENOMEM;
	if (rc == 0) {
		end_strings(f.keys, f.nkeys, out->keys);
		out->n = f.nkeys;
		if (f.has_ns)
			end_strings(&f.ns, 1, &out->ns);
	}
	fields_free(&f);
	return rc;
}

int flat_scan_write(char *text, size_t len, int confirm, size_t max_keys, struct flat_write *w)
{
	struct fields f = {0};
	int rc = scan_body(text, len, confirm ? CONFIRM : RESERVE, max_keys, &f);

	memset(w, 0, sizeof(*w));
	if (rc == 0 && f.nkeys && !(w->keys = malloc(f.nkeys * sizeof(*w->keys))))
		rc = -ENOMEM;
	if (rc == 0) {
		end_strings(f.keys, f.nkeys, w->keys);
		w->n = f.nkeys;
		w->slots = f.slots;
		w->release = f.release;
		w->nrel = f.nrel;
		f.slots = f.release = NULL;
		if (f.has_ns)
			end_strings(&f.ns, 1, &w->ns);
	}
	fields_free(&f);
	return rc;
}

int flat_parse(char *text, size_t len, size_t max_keys, struct flat *f)
{
	int rc = flat_scan(text, len, max_keys, f);

	return rc == 1 ? flat_parse_copy(text, len, max_keys, f) : rc;
}

int flat_parse_write(char *text, size_t len, int confirm, size_t max_keys, struct flat_write *w)
{
	int rc = flat_scan_write(text, len, confirm, max_keys, w);

	return rc == 1 ? flat_parse_write_copy(text, len, confirm, max_keys, w) : rc;
}
