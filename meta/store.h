/*
 * store.h - the durable record of the index, behind the in-memory engine.
 *
 * The engine loads the store once at open and then only appends batches
 * of records to it from the journal's batch writer (one at a time: a
 * waiting thread or the journal's own, journal.c). Two engines
 * implement the same calls, chosen by the URI scheme: store_sqlite.c
 * (sqlite:PATH or a bare path, the embedded default) and store_pg.c
 * (postgres:// or postgresql://, a shared PostgreSQL). store.c parses
 * the URI and dispatches through struct store_ops. All functions return
 * 0 or a negative errno and, where they take err, write a message that
 * names the fix.
 */
#ifndef PAGEFS_META_STORE_H
#define PAGEFS_META_STORE_H

#include "meta/rec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

struct store;
struct meta;

/* The SQLite index's schema version: 2 has no UNIQUE(pool, name) index on
 * pages, 3 no UNIQUE(pool, slot) either, 4 a page log for bulk records
 * (store_sqlite.c, sqlite_log.h, DECISIONS.md); indexes of versions 1 to
 * 3 are used as they are (their bulk records are rows). */
#define STORE_SCHEMA_VERSION 4

struct store_pool_row {
	uint32_t id;
	uint16_t rank;
	char ns[META_NS_MAX + 1];
	uint64_t slot_size, capacity;
	int retired; /* a shared index's tombstone (being removed): not served */
};

struct store_load_cb {
	void *arg;
	int (*rank)(void *arg, int rank);
	int (*pool)(void *arg, const struct store_pool_row *row);
	/* Pages arrive in any order (the engine orders its LRU by atime,
	 * then id). */
	int (*page)(void *arg, const struct rec *row);
	/* A record of the SQLite index's page log that does not decode (its
	 * pages are lost): reported here and left out (fsck), or, NULL, the
	 * load fails naming fsck. */
	int (*log_damaged)(void *arg, int64_t seq, const char *why);
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
	int (*lock)(struct store *s, int exclusive, char *err, size_t errlen);
	int (*get_setting)(struct store *s, const char *key, char *buf, size_t len);
	int (*set_setting)(struct store *s, const char *key, const char *value);
	int (*load)(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen);
	uint64_t (*estimate)(struct store *s);
	int (*begin)(struct store *s);
	int (*apply)(struct store *s, struct rec *r);
	int (*commit)(struct store *s);
	void (*rollback)(struct store *s);
	int (*iter_pages)(struct store *s, uint32_t pool_id, uint64_t after, meta_page_cb cb,
	                  void *arg);
};

/* ---- several daemons on one index (PostgreSQL; store_pg_sync.c) ----
 *
 * Calls of the sync thread (meta/cluster/sync.c) on a connection of its own. */

/* One change of the feed: a page (as the index holds it now), or pools. */
struct store_change {
	int pools;          /* pools or ranks changed: reload them */
	uint32_t node;      /* the node that made it */
	uint64_t xid;       /* its transaction */
	uint32_t pool_id;   /* page changes */
	uint64_t page_id;   /* page changes */
	int64_t freed_slot; /* a slot the change freed, or -1 */
	int exists;         /* the page row exists now; row holds it */
	struct rec row;
};

/* A node whose last renewal is this old may be removed by another node's
 * heartbeat once its sync session is gone (store_pg_sync.c's reap rule;
 * lease.c keeps under it). */
#define STORE_REAP_SURE_NS 2000000000LL

/* What one heartbeat learnt about the other nodes. */
struct store_peers {
	int fenced;          /* this node's row is gone: it must stop writing */
	uint32_t live;       /* live nodes, this one included */
	uint64_t min_ack;    /* frees by transactions below it are seen by all */
	size_t npins;        /* slots other nodes still pin (pool, slot) */
	uint64_t (*pins)[2]; /* malloc'd; the caller frees */
	/* Pools where another node asked for a chunk (pagefs_wants): pool
	 * id, chunks this node holds there, nodes that hold or want chunks
	 * of it. malloc'd; the caller frees. */
	size_t nwants;
	uint64_t (*wants)[3];
	/* Retired pool rows whose remover died, now this node's to finish
	 * (unlink the data file, delete the row); malloc'd, the caller frees. */
	size_t norphans;
	struct store_pool_row *orphans;
};

struct store_sync_ops {
	/* Calls cb for every change of transactions that finished since the
	 * last call (the feed's position is kept by the store), pools first.
	 * Returns 0, cb's error, or a negative errno. */
	int (*poll)(struct store *s, int (*cb)(void *arg, const struct store_change *c), void *arg);
	/* Calls cb with the current row of each of names[0..n) (lens[i]
	 * bytes each) that has a page in pool pool_id now, as a change of a
	 * page that exists (node 0). For a feed batch that deletes the page a
	 * name had while the transaction that gave the name to another page
	 * is not read yet. 0, cb's error, or a negative errno. */
	int (*named)(struct store *s, uint32_t pool_id, const char *const *names,
	             const size_t *lens, size_t n,
	             int (*cb)(void *arg, const struct store_change *c), void *arg);
	/* Streams the pool and rank rows as store_load does. */
	int (*pools)(struct store *s, const struct store_load_cb *cb);
	/* Heartbeat: renews this node's lease, records that it has applied
	 * the feed up to where poll stopped and that it still pins pins[],
	 * reaps nodes whose lease ran out, and reports the peers and the
	 * chunk handovers asked of this node. */
	int (*heartbeat)(struct store *s, const uint64_t (*pins)[2], size_t npins,
	                 struct store_peers *out);
	/* A new block of ids: [*first, *first + *count); pool=1 for pool ids. */
	int (*ids)(struct store *s, int pool, uint64_t *first, uint64_t *count);
};

/* Every engine's handle starts with this. */
struct store {
	const struct store_ops *ops;
	const struct store_sync_ops *sync; /* NULL: one daemon per index */
	enum store_engine engine;
	uint32_t node_id; /* this daemon's node (shared index), set by store_lock */
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

/* Takes the daemon lock of the index, held until store_close. SQLite:
 * always exclusive (flock on PATH.lock). PostgreSQL: exclusive (fsck) or
 * shared by the daemons, each of which joins as a node (node_id, a row in
 * pagefs_nodes; store_close leaves). A holder is named in err: -EBUSY. */
int store_lock(struct store *s, int exclusive, char *err, size_t errlen);

/* Settings (small key/value rows). get: 0, -ENOENT. */
int store_get_setting(struct store *s, const char *key, char *buf, size_t len);
int store_set_setting(struct store *s, const char *key, const char *value);

int store_load(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen);
/* How many pages the index probably holds, erring a little high (what the
 * engine sizes its hash tables by before the load); 0 when unknown. */
uint64_t store_estimate(struct store *s);

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

/* owner.c: the SQLite index's daemon lock, and the backing's owner file
 * (which index a backing directory belongs to; fsck reads it too). */
#define OWNER_FILE ".pagefs-owner"
/* Takes an SQLite index's exclusive lock (INDEX.lock); -EBUSY names the
 * holder. store_sqlite.c's store_lock. */
int store_index_lock(const char *db_path, int *fd, char *err, size_t errlen);
int store_read_owner(const char *backing, char *id, size_t len);
int store_write_owner(const char *backing, const char *uri, const char *id);

#endif
