/*
 * store.h - the durable record of the index, behind the in-memory engine.
 *
 * The engine loads the store once at open and then only appends batches
 * of records to it from the journal's writer thread. Two engines
 * implement the same calls, chosen by the URI scheme: store_sqlite.c
 * (sqlite:PATH or a bare path, the embedded default) and store_pg.c
 * (postgres:// or postgresql://, a shared PostgreSQL). store.c parses
 * the URI and dispatches through struct store_ops. All functions return
 * 0 or a negative errno and, where they take err, write a message that
 * names the fix.
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

enum store_engine { STORE_SQLITE, STORE_PG };

/* A --meta URI taken apart. target: the SQLite path or the full libpq
 * URI (points into the URI given). display: what messages and the
 * backing directory's owner mark show (a password is masked). */
struct store_uri {
	enum store_engine engine;
	const char *target;
	char display[1024];
};

/* Parses "sqlite:PATH", a bare PATH, "postgres://..." or
 * "postgresql://...". 0, or -EPROTONOSUPPORT/-EINVAL with a message. */
int store_parse_uri(const char *uri, struct store_uri *out, char *err, size_t errlen);

/* One engine. Each call has the meaning of the store_* wrapper below. */
struct store_ops {
	void (*close)(struct store *s);
	int (*lock)(struct store *s, char *err, size_t errlen);
	int (*get_setting)(struct store *s, const char *key, char *buf, size_t len);
	int (*set_setting)(struct store *s, const char *key, const char *value);
	int (*load)(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen);
	int (*begin)(struct store *s);
	int (*apply)(struct store *s, struct rec *r);
	int (*commit)(struct store *s);
	void (*rollback)(struct store *s);
	int (*iter_pages)(struct store *s, uint32_t pool_id, uint64_t after, meta_page_cb cb,
	                  void *arg);
};

/* Every engine's handle starts with this. */
struct store {
	const struct store_ops *ops;
	enum store_engine engine;
};

/* Opens or creates the store a URI names; power=1 makes commits survive
 * power loss. Checks (and creates or migrates) the schema. The caller
 * owns *out (store_close). */
int store_open(const char *uri, int power, int read_only, struct store **out, char *err,
               size_t errlen);
int store_sqlite_open(const char *path, int power, int read_only, struct store **out, char *err,
                      size_t errlen);
int store_pg_open(const char *uri, const char *display, int power, int read_only,
                  struct store **out, char *err, size_t errlen);
void store_close(struct store *s);

/* Takes the exclusive daemon lock of the index, held until store_close
 * (SQLite: flock on PATH.lock; PostgreSQL: an advisory lock of the
 * session). A holder is named in err: -EBUSY. */
int store_lock(struct store *s, char *err, size_t errlen);

/* Settings (small key/value rows). get: 0, -ENOENT. */
int store_get_setting(struct store *s, const char *key, char *buf, size_t len);
int store_set_setting(struct store *s, const char *key, const char *value);

int store_load(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen);

/* One transaction: begin, apply records (each fails alone), commit. A
 * lost connection fails the whole transaction with -EIO; the next begin
 * reconnects. */
int store_begin(struct store *s);
int store_apply(struct store *s, struct rec *r);
int store_commit(struct store *s);
void store_rollback(struct store *s);

/* Committed pages of a pool with id > after, in id order (a separate
 * read connection; serialised by its own mutex). */
int store_iter_pages(struct store *s, uint32_t pool_id, uint64_t after, meta_page_cb cb, void *arg);

#endif
