/*
 * sqlite_blob.h - the bytes of a page log blob (store_sqlite_blob.c),
 * private to meta/store/: the pages of a run of consecutive ids, written
 * as compact entries with a checksum over them and their row's columns.
 */
#ifndef PAGEFS_META_STORE_SQLITE_BLOB_H
#define PAGEFS_META_STORE_SQLITE_BLOB_H

#include "meta/rec.h"

#include <stddef.h>
#include <stdint.h>

/* The most pages a blob may hold when read: a blob of another version's
 * size of run still loads. */
#define STORE_BLOB_READ_MAX 4096

/* rows[0 .. n) (ids ascending within lo .. lo + span - 1) as the blob of
 * the row (pool, lo, span): *out (malloc'd), *len. 0 or -ENOMEM. */
int store_blob_encode(const struct bulk_row *rows, size_t n, uint32_t pool, uint64_t lo,
                      uint32_t span, unsigned char **out, size_t *len);

/* The pages of blob body (len bytes) of the row (pool, lo, span), in
 * *rows (malloc'd), their count in *n; the caller checked that lo + span
 * does not overflow. 0, -ENOMEM, or -EBADMSG with why set. */
int store_blob_decode(const void *body, size_t len, uint32_t pool, uint64_t lo, uint32_t span,
                      struct bulk_row **rows, size_t *n, const char **why);

#endif
