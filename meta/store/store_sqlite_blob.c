/*
 * store_sqlite_blob.c - the bytes of a page log blob (sqlite_blob.h):
 * pages to a blob and back, nothing else.
 *
 * A blob: a version byte, the page count, each page, then the XXH3-64 of
 * all that seeded with the XXH3-64 of the row's pool, first id and span
 * (three little-endian 64-bit words), so a damaged blob, or a blob whose
 * row columns changed, is found, not misread. Integers are LEB128 varints,
 * signed ones zigzag. A page in version 2 (written; put_row), each field
 * against the page before it in the blob (zeros for the first):
 *   id offset from the first id; slot as a signed difference; a flags
 *   byte (F_SUM: a checksum follows, 8 bytes; F_LEN: the length is the
 *   previous page's, else a varint follows; F_HEX: the name's own part is
 *   packed hex digits); mtime as a signed difference; atime as a signed
 *   difference from mtime; the gen column; how many bytes the name shares
 *   with the end of the previous name; the length of the rest, which
 *   comes before them, then its bytes (two lowercase hex digits a byte
 *   under F_HEX).
 * Version 1 (read only): id offset, slot, length, flags (F_SUM), the
 * checksum, mtime, atime from mtime, gen, the name's length and bytes.
 * A confirm of keys named by a hash and a shared suffix takes about 40
 * bytes a key in version 2 and 100 in version 1, and a blob of 64 keys
 * then fits in one 4 KiB page of the database: half the WAL written a key.
 */
#include "meta/store/sqlite_blob.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define PLOG_VERSION 2 /* written; 1 is read too */
#define F_SUM 1        /* a checksum follows */
#define F_LEN 2        /* (2) the length is the previous page's */
#define F_HEX 4        /* (2) the name's own part is packed hex digits */

/* Where the next byte of a blob goes: the blob is sized once for its
 * largest encoding (row_max), so the fields are stored without a check of
 * room each (a check and a call a field were a third of a confirm's
 * encoding). */
struct out {
	unsigned char *p;
};

static void put_bytes(struct out *o, const void *src, size_t n)
{
	memcpy(o->p, src, n);
	o->p += n;
}

static void put_varint(struct out *o, uint64_t v)
{
	while (v >= 0x80) {
		*o->p++ = (unsigned char)(v | 0x80);
		v >>= 7;
	}
	*o->p++ = (unsigned char)v;
}

static void put_le64(struct out *o, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		*o->p++ = (unsigned char)(v >> (8 * i));
}

static uint64_t zigzag(int64_t v)
{
	return ((uint64_t)v << 1) ^ (uint64_t)(v >> 63);
}

static int64_t unzigzag(uint64_t v)
{
	return (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
}

/* Each byte's value as a lowercase hex digit, or 16: not one. A table,
 * not comparisons: the digits of a hash are random, so branches on them
 * are mispredicted a third of the time (12 % of a confirm's CPU). */
static unsigned char hex_of[256];

static void hex_init(void)
{
	memset(hex_of, 16, sizeof(hex_of));
	for (int i = 0; i < 16; i++)
		hex_of[(unsigned char)"0123456789abcdef"[i]] = (unsigned char)i;
}

/* Packs the n (even) hex digits at p into n / 2 bytes at o, two digits a
 * byte; 0 if one of them is not a lowercase hex digit (o then holds
 * bytes to be written over). One pass: checking first and packing after
 * read each digit twice. */
static int pack_hex(struct out *o, const char *p, size_t n)
{
	unsigned bad = 0;

	for (size_t i = 0; i < n; i += 2) {
		unsigned hi = hex_of[(unsigned char)p[i]], lo = hex_of[(unsigned char)p[i + 1]];
		bad |= hi | lo;
		o->p[i / 2] = (unsigned char)(hi << 4 | lo);
	}
	if (bad & 16)
		return 0;
	o->p += n / 2;
	return 1;
}

/* The most bytes put_row takes for a page whose name is name_len long:
 * ten a varint (eight of them), the flags and the checksum. */
static size_t row_max(size_t name_len)
{
	return 8 * 10 + 1 + 8 + name_len;
}

/* Page r of a run at lo, after prev (the previous page of the blob, or
 * all zeros), in version 2; o has room for row_max(r->name_len). */
static void put_row(struct out *o, uint64_t lo, const struct bulk_row *prev,
                    const struct bulk_row *r)
{
	size_t shared = 0;

	while (shared < r->name_len && shared < prev->name_len &&
	       r->name[r->name_len - 1 - shared] == prev->name[prev->name_len - 1 - shared])
		shared++;
	size_t own = r->name_len - shared;
	/* (differences in uint64_t: any two values, no overflow) */
	put_varint(o, r->id - lo);
	put_varint(o, zigzag((int64_t)(r->slot - prev->slot)));
	unsigned char *flags = o->p++; /* F_HEX is known once the name is packed */
	*flags = (unsigned char)((r->has_checksum ? F_SUM : 0) |
	                         (r->length == prev->length ? F_LEN : 0));
	if (r->has_checksum)
		put_le64(o, r->checksum);
	if (!(*flags & F_LEN))
		put_varint(o, r->length);
	put_varint(o, zigzag((int64_t)((uint64_t)r->mtime_ns - (uint64_t)prev->mtime_ns)));
	put_varint(o, zigzag((int64_t)((uint64_t)r->atime_ns - (uint64_t)r->mtime_ns)));
	put_varint(o, (uint64_t)r->gen);
	put_varint(o, shared);
	put_varint(o, own);
	if (own % 2 == 0 && pack_hex(o, r->name, own))
		*flags |= F_HEX;
	else
		put_bytes(o, r->name, own);
}

/* The checksum of a blob's len bytes, seeded with its row's columns. */
static uint64_t blob_sum(const void *p, size_t len, uint32_t pool, uint64_t lo, uint32_t span)
{
	unsigned char cols[24];
	const uint64_t v[3] = {pool, lo, span};

	for (int w = 0; w < 3; w++)
		for (int i = 0; i < 8; i++)
			cols[8 * w + i] = (unsigned char)(v[w] >> (8 * i));
	return XXH3_64bits_withSeed(p, len, XXH3_64bits(cols, sizeof(cols)));
}

/* Ends the blob of a run (pool, lo, span) of `count` pages, from blob
 * to o (the header's 5 bytes left for here): writes the header (version,
 * count as a fixed 4-byte varint) and the checksum. */
static void seal(unsigned char *blob, struct out *o, uint32_t count, uint32_t pool, uint64_t lo,
                 uint32_t span)
{
	blob[0] = PLOG_VERSION;
	for (int i = 0; i < 4; i++)
		blob[1 + i] = (unsigned char)(((count >> (7 * i)) & 0x7f) | (i < 3 ? 0x80 : 0));
	put_le64(o, blob_sum(blob, (size_t)(o->p - blob), pool, lo, span));
}

struct reader {
	const unsigned char *p, *end;
	int bad;
};

static uint64_t get_varint(struct reader *r)
{
	uint64_t v = 0;

	for (int shift = 0; shift < 64; shift += 7) {
		if (r->p >= r->end) {
			r->bad = 1;
			return 0;
		}
		unsigned char c = *r->p++;
		v |= (uint64_t)(c & 0x7f) << shift;
		if (!(c & 0x80))
			return v;
	}
	r->bad = 1;
	return 0;
}

static unsigned char get_byte(struct reader *r)
{
	if (r->p >= r->end) {
		r->bad = 1;
		return 0;
	}
	return *r->p++;
}

static uint64_t get_sum(struct reader *r)
{
	uint64_t v = 0;

	if (r->end - r->p < 8) {
		r->bad = 1;
		return 0;
	}
	for (int k = 0; k < 8; k++)
		v |= (uint64_t)r->p[k] << (8 * k);
	r->p += 8;
	return v;
}

/* The fields of a version 1 page after its id offset. */
static void get_row_v1(struct reader *r, struct bulk_row *w)
{
	w->slot = get_varint(r);
	w->length = get_varint(r);
	w->has_checksum = get_byte(r) & F_SUM;
	if (w->has_checksum)
		w->checksum = get_sum(r);
	w->mtime_ns = (int64_t)get_varint(r);
	w->atime_ns = (int64_t)((uint64_t)w->mtime_ns + (uint64_t)unzigzag(get_varint(r)));
	w->gen = (int64_t)get_varint(r);
	uint64_t nl = get_varint(r);
	if (r->bad || nl > META_NAME_MAX || (uint64_t)(r->end - r->p) < nl) {
		r->bad = 1;
		return;
	}
	memcpy(w->name, r->p, nl);
	w->name[nl] = '\0';
	w->name_len = (uint16_t)nl;
	r->p += nl;
}

/* The fields of a version 2 page after its id offset (put_row). */
static void get_row_v2(struct reader *r, const struct bulk_row *prev, struct bulk_row *w)
{
	static const char digits[] = "0123456789abcdef";

	w->slot = prev->slot + (uint64_t)unzigzag(get_varint(r));
	unsigned char flags = get_byte(r);
	w->has_checksum = flags & F_SUM;
	if (w->has_checksum)
		w->checksum = get_sum(r);
	w->length = flags & F_LEN ? prev->length : get_varint(r);
	w->mtime_ns = (int64_t)((uint64_t)prev->mtime_ns + (uint64_t)unzigzag(get_varint(r)));
	w->atime_ns = (int64_t)((uint64_t)w->mtime_ns + (uint64_t)unzigzag(get_varint(r)));
	w->gen = (int64_t)get_varint(r);
	uint64_t shared = get_varint(r), own = get_varint(r);
	uint64_t bytes = flags & F_HEX ? own / 2 : own;
	if (r->bad || shared > prev->name_len || own > META_NAME_MAX - shared ||
	    (flags & F_HEX && own % 2) || (uint64_t)(r->end - r->p) < bytes) {
		r->bad = 1;
		return;
	}
	for (uint64_t k = 0; k < bytes; k++) {
		if (flags & F_HEX) {
			w->name[2 * k] = digits[r->p[k] >> 4];
			w->name[2 * k + 1] = digits[r->p[k] & 15];
		} else {
			w->name[k] = (char)r->p[k];
		}
	}
	r->p += bytes;
	memcpy(w->name + own, prev->name + prev->name_len - shared, shared);
	w->name_len = (uint16_t)(own + shared);
	w->name[w->name_len] = '\0';
}

int store_blob_decode(const void *body, size_t len, uint32_t pool, uint64_t lo, uint32_t span,
                      struct bulk_row **rows, size_t *n, const char **why)
{
	static const struct bulk_row none;
	const unsigned char *p = body;
	struct reader r;
	uint64_t sum = 0;

	*rows = NULL;
	*n = 0;
	if (len < 8 + 5 || !p) {
		*why = "too short";
		return -EBADMSG;
	}
	r = (struct reader){p, p + len - 8, 0};
	for (int i = 0; i < 8; i++)
		sum |= (uint64_t)p[len - 8 + i] << (8 * i);
	if (sum != blob_sum(p, len - 8, pool, lo, span)) {
		*why = "checksum mismatch";
		return -EBADMSG;
	}
	unsigned char version = *r.p++;
	if (version != 1 && version != 2) {
		*why = "unknown version";
		return -EBADMSG;
	}
	uint64_t count = get_varint(&r);
	if (r.bad || count > STORE_BLOB_READ_MAX) {
		*why = "bad page count";
		return -EBADMSG;
	}
	struct bulk_row *out = calloc(count ? count : 1, sizeof(*out));
	if (!out)
		return -ENOMEM;
	for (uint64_t i = 0; i < count && !r.bad; i++) {
		struct bulk_row *w = &out[i];
		uint64_t off = get_varint(&r);
		if (off >= span) {
			r.bad = 1;
			break;
		}
		w->id = lo + off;
		w->pool_id = pool;
		if (version == 1)
			get_row_v1(&r, w);
		else
			get_row_v2(&r, i ? &out[i - 1] : &none, w);
	}
	if (r.bad || r.p != r.end) {
		free(out);
		*why = "bad page entry";
		return -EBADMSG;
	}
	*rows = out;
	*n = count;
	return 0;
}

int store_blob_encode(const struct bulk_row *rows, size_t n, uint32_t pool, uint64_t lo,
                      uint32_t span, unsigned char **out, size_t *len)
{
	static pthread_once_t once = PTHREAD_ONCE_INIT;
	static const struct bulk_row no_row;
	size_t max = 5 + 8;

	pthread_once(&once, hex_init);
	for (size_t i = 0; i < n; i++)
		max += row_max(rows[i].name_len);
	unsigned char *blob = malloc(max);
	if (!blob)
		return -ENOMEM;
	struct out o = {blob + 5};
	for (size_t i = 0; i < n; i++)
		put_row(&o, lo, i ? &rows[i - 1] : &no_row, &rows[i]);
	seal(blob, &o, (uint32_t)n, pool, lo, span);
	*out = blob;
	*len = (size_t)(o.p - blob);
	return 0;
}
