/*
 * store.h - the durable record of the index, behind the in-memory engine.
 *
 * The engine loads the store once at open and then only appends batches
 * of records to it from the journal's writer thread. One implementation
 * today (store_sqlite.c); a shared engine such as PostgreSQL implements
 * the same calls. All functions return 0 or a negative errno and, where
 * they take err, write a message that names the fix.
 */
#ifndef PAGEFS_META_STORE_H
#define PAGEFS_META_STORE_H

#include "meta/internal.h"

#define STORE_SCHEMA_VERSION 1

struct store_pool_row {
	uint32_t id;
	uint16_t rank;
	char ns[META_NS_MAX + 1];
	uint64_t slot_size, capacity;
};

struct store_load_cb {
	void *arg;
	int (*rank)(void *arg, int rank);
	int (*pool)(void *arg, const struct store_pool_row *row);
	/* Pages arrive in any order (the engine orders its LRU by atime,
	 * then id). */
	int (*page)(void *arg, const struct rec *row);
};

/* Opens or creates the store at path; power=1 makes commits survive power
 * loss. Checks the schema version. */
int store_open(const char *path, int power, int read_only, struct store **out, char *err,
               size_t errlen);
void store_close(struct store *s);

/* Settings (small key/value rows). get: 0, -ENOENT. */
int store_get_setting(struct store *s, const char *key, char *buf, size_t len);
int store_set_setting(struct store *s, const char *key, const char *value);

int store_load(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen);

/* One transaction: begin, apply records (each fails alone), commit. */
int store_begin(struct store *s);
int store_apply(struct store *s, struct rec *r);
int store_commit(struct store *s);
void store_rollback(struct store *s);

/* Committed pages of a pool with id > after, in id order (a separate
 * read connection; serialised by its own mutex). */
int store_iter_pages(struct store *s, uint32_t pool_id, uint64_t after, meta_page_cb cb, void *arg);

#endif
