/*
 * meta.h - the pagefs index engine: pools, pages, slots, pins and the
 * durable record of all of them.
 *
 * This is the only interface fs/, serve/ and tools/ use to reach the
 * index. It knows nothing of FUSE or HTTP: callers get plain structs and
 * 0 or a negative errno. The engine keeps every pool and page in memory
 * (lookups, stats and pins never touch the store) and records changes
 * through one writer thread that group-commits them to the store, SQLite
 * or PostgreSQL as the URI's scheme says (PostgreSQL also lets several
 * daemons share one index). See docs/DESIGN.md for the protocol.
 *
 * Visibility rule: a mutation (commit, unlink, rename, pool change) is
 * applied to memory by the journal only after the store made it
 * durable; the calling function returns after that. So what a caller
 * sees after a call returns survives a crash of the process.
 *
 * Thread safety: every function may be called from any thread.
 */
#ifndef PAGEFS_META_H
#define PAGEFS_META_H

#include <stddef.h>
#include <stdint.h>

#define META_NS_MAX 64    /* namespace: [a-z0-9_]{1,64} */
#define META_NAME_MAX 255 /* page file name bytes */
#define META_RANK_MAX 65535
/* A pool's geometry: pages keep slot and length in 32 bits each. */
#define META_SLOT_SIZE_MAX (1ULL << 31) /* bytes per slot: 2 GiB */
#define META_SLOTS_MAX 0xffffffffULL    /* slots per pool */
/* Page ids (inode numbers keep 48 bits of them, and so do pages in
 * memory): 2.8e14 pages made, 9 years of a million a second. */
#define META_PAGE_ID_MAX ((1ULL << 48) - 1)
/* Page mtimes are kept to 2^-16 s: a commit's is at most this much
 * (in ns) before the moment it was taken. */
#define META_MTIME_GRAIN_NS 15259

enum meta_evict { META_EVICT_LRU = 0, META_EVICT_NONE = 1 };
enum meta_verify { META_VERIFY_NONE = 0, META_VERIFY_FIRST = 1, META_VERIFY_ALWAYS = 2 };
enum meta_durability { META_DURABLE_PROCESS = 0, META_DURABLE_POWER = 1 };

struct meta; /* opaque engine handle */

struct meta_config {
	const char *uri;            /* "sqlite:PATH" (or a bare path), "postgres://..." */
	const char *backing;        /* backing directory holding the data files */
	const char *prefix;         /* data file prefix, e.g. "hicache" */
	uint64_t default_slot_size; /* bytes, for pools created without one */
	uint64_t default_capacity;  /* bytes, for pools created without one */
	enum meta_evict evict;
	enum meta_verify verify;
	enum meta_durability durability;
	int read_only; /* open the index without changing it */
	/* Where pools' presence tables go (meta_pool_presence), and their
	 * file mode; NULL: no tables. */
	const char *presence_dir;
	unsigned presence_mode;
};

/* One pool as the engine sees it right now (a copy). */
struct meta_pool_info {
	uint32_t id;
	uint16_t rank;
	char ns[META_NS_MAX + 1];
	uint64_t slot_size;  /* bytes per slot */
	uint64_t capacity;   /* slots */
	uint64_t pages;      /* committed pages */
	uint64_t bytes;      /* sum of committed page lengths */
	uint64_t used_slots; /* committed + reserved + waiting to be freed */
	/* What holds the used slots that no committed page names: */
	uint64_t writing;      /* pages being written (reservations) */
	uint64_t pinned_slots; /* slots readers have open */
	uint64_t freed_open;   /* of them, slots of pages gone since: free at last close */
	uint64_t hits, misses, evictions, checksum_failures;
	uint64_t bytes_read, bytes_written;
	/* The directory's mtime and ctime: the last publish, rename,
	 * unlink or eviction of a page (0: none known). */
	int64_t mtime_ns;
	char data_file[4096]; /* absolute path of the pool's data file */
	int data_fd;          /* open O_RDWR data file; valid while the pool
	                          * exists (a pool with pages cannot be removed) */
};

/* One page (a copy). */
struct meta_page_info {
	uint64_t id; /* stable across remounts; never shared */
	uint32_t pool_id;
	uint32_t gen; /* mount epoch the page was created in */
	uint64_t slot;
	uint64_t length;
	uint64_t checksum; /* XXH3-64 of the bytes; valid if has_checksum */
	int has_checksum;
	int committed; /* 0: still being written by its creator */
	uint32_t
		version; /* in-place replacements (O_TRUNC), kept across remounts (wraps at 2^16) */
	int opened;      /* a reader opened this version before this open */
	int64_t mtime_ns; /* commit time */
	int64_t ctime_ns; /* the commit's or, since this mount, the last rename's */
	int64_t atime_ns; /* last use */
	char name[META_NAME_MAX + 1];
};

struct meta_stats {
	uint64_t pools, pages, bytes, capacity_bytes, free_bytes;
	uint64_t total_slots, free_slots;
	uint64_t hits, misses, evictions, checksum_failures;
	uint64_t bytes_read, bytes_written;
	uint64_t store_batches; /* store transactions committed */
	uint64_t store_records; /* records in them (records/batch = group commit) */
};

/* ---- names and sizes (pure functions) ---- */

/* Returns the rank for a canonical decimal "0".."65535", or -EINVAL. */
int meta_parse_rank(const char *s);
/* Returns 0 if s matches [a-z0-9_]{1,64}, else -EINVAL. */
int meta_check_ns(const char *s);
/* Returns 0, -EINVAL (empty, "/", ".", "..") or -ENAMETOOLONG (>255). */
int meta_check_name(const char *s);
/* meta_check_name, with strlen(s) in *len (0 for NULL). */
int meta_check_name_len(const char *s, size_t *len);
/* Returns 0 if s is a data file prefix: [A-Za-z0-9_.-]{1,128} without "..",
 * so that "{prefix}.{rank}.bin" stays a plain file name in BACKING. */
#define META_PREFIX_MAX 128
int meta_check_prefix(const char *s);
/* Parses "4096", "64K", "16M", "1G", "1T" (powers of two). 0 or -EINVAL. */
int meta_parse_size(const char *s, uint64_t *out);
/* Parses a size sent as an xattr value: size bytes, not NUL-terminated,
 * trailing newlines and NULs ignored (setfattr, echo -n or not). Rejects
 * 0, a NUL inside ("1M\0junk") and anything meta_parse_size rejects.
 * 0 or -EINVAL. */
int meta_parse_size_value(const char *value, size_t size, uint64_t *out);
/* Formats bytes as the shortest exact form ("16M", "1000"). */
void meta_format_size(uint64_t bytes, char *buf, size_t len);

/* ---- lifecycle ---- */

/*
 * Opens (creating if needed) the index named by cfg->uri for the backing
 * directory cfg->backing, takes its exclusive lock, recovers after a crash
 * and loads it into memory. On failure returns a negative errno and writes
 * a message that names the fix into err.
 */
int meta_open(const struct meta_config *cfg, struct meta **out, char *err, size_t errlen);
/* Flushes the writer, closes the store, frees everything. NULL is fine. */
void meta_close(struct meta *m);

/* The URI as messages, logs and status show it: a PostgreSQL password
 * (user:PASS@ or password=) is masked as "***"; other URIs are copied. */
void meta_uri_display(const char *uri, char *buf, size_t len);

/*
 * For tools that need a fresh PostgreSQL index (the benchmark): creates
 * schema `schema` ([a-z0-9_]) in the database uri names (create=1) and
 * writes to out the URI of an index in it, or drops it with everything in
 * it (create=0; out may be NULL). 0, or a negative errno with err set.
 */
int meta_pg_schema(const char *uri, const char *schema, int create, char *out, size_t outlen,
                   char *err, size_t errlen);
/* Bytes the tables of the PostgreSQL index uri names take, their indexes
 * included (pg_total_relation_size). 0, or a negative errno with err. */
int meta_pg_index_bytes(const char *uri, uint64_t *bytes, char *err, size_t errlen);

/* Default index path for a backing directory (user's state directory). */
int meta_default_uri(const char *backing, char *buf, size_t len);

/* Called (outside all engine locks) when a name changes without a FUSE
 * request the kernel saw: the engine dropped a committed page by itself
 * (eviction, checksum failure, a same-name replacement), or the key
 * protocol published or deleted one. The kernel's cached entry for the
 * name (positive or negative) must go. */
typedef void (*meta_drop_cb)(void *arg, uint32_t pool_id, uint64_t page_id, const char *name);
void meta_set_drop_cb(struct meta *m, meta_drop_cb cb, void *arg);

/* Called (outside all engine locks) when another node removed a rank
 * (ns NULL) or a pool directory (rank, ns): the kernel's cached entry for
 * it must go. */
typedef void (*meta_dir_cb)(void *arg, int rank, const char *ns);
void meta_set_dir_cb(struct meta *m, meta_dir_cb cb, void *arg);

/* ---- ranks and pools ---- */

int meta_rank_exists(struct meta *m, int rank); /* 1 or 0 */
int meta_rank_create(struct meta *m, int rank); /* 0, -EEXIST */
int meta_rank_remove(struct meta *m, int rank); /* 0, -ENOENT, -ENOTEMPTY */
/* Lists ranks > after in order into out[0..max); returns the count. */
int meta_rank_list(struct meta *m, int after, uint16_t *out, int max);

/* Looks up a pool by (rank, ns). 0 or -ENOENT. */
int meta_pool_find(struct meta *m, int rank, const char *ns, struct meta_pool_info *out);
int meta_pool_get(struct meta *m, uint32_t pool_id, struct meta_pool_info *out);
/* The path of the pool's presence table (docs/DESIGN.md, "The presence
 * table") into path, made now if the pool has none: a file of shared
 * memory that clients map to tell which names are committed pages
 * without a request. 0; -ENOENT: no such pool; -EOPNOTSUPP: the mount
 * keeps no tables; -ERANGE: len too small; another -errno: the file
 * could not be made. */
int meta_pool_presence(struct meta *m, uint32_t pool_id, char *path, size_t len);
/* Whether a pool of `slots` slots of slot_size bytes is allowed: 0, or
 * -EINVAL (no slot, a slot over META_SLOT_SIZE_MAX bytes, or over
 * META_SLOTS_MAX slots). */
int meta_check_geometry(uint64_t slot_size, uint64_t slots);
/* Creates a pool (and its rank and data file). slot_size/capacity 0 take
 * the mount defaults. -EEXIST, -EINVAL (meta_check_geometry), -ENOSPC
 * (the process holds POOLS_MAX pools), or the data file's errno. */
int meta_pool_create(struct meta *m, int rank, const char *ns, uint64_t slot_size,
                     uint64_t capacity_bytes, struct meta_pool_info *out);
/* Changes slot size (only while the pool has no pages: -EBUSY) and/or
 * capacity (not below the slots in use: -EBUSY). 0 leaves a value as is.
 * The capacity must be a whole number of slots within
 * meta_check_geometry (else -EINVAL). */
int meta_pool_set(struct meta *m, uint32_t pool_id, uint64_t slot_size, uint64_t capacity_bytes);
/* Removes an empty pool: 0, -ENOENT, -ENOTEMPTY. */
int meta_pool_remove(struct meta *m, uint32_t pool_id);
/* Lists pools of a rank with id > after, in id order; returns the count. */
int meta_pool_list(struct meta *m, int rank, uint32_t after, struct meta_pool_info *out, int max);

/* ---- pages ---- */

/*
 * Looks up a committed page by name and refreshes its recency. Returns 0,
 * or -ENOENT; *pending is set to 1 when a writer is creating that name.
 */
int meta_page_lookup(struct meta *m, uint32_t pool_id, const char *name, struct meta_page_info *out,
                     int *pending);
/* A page (committed or being written) by id. 0 or -ENOENT. */
int meta_page_get(struct meta *m, uint64_t page_id, struct meta_page_info *out);
/* 1 if the page left the index lately because another page took its name
 * (a rename over it, a new page or a confirmed key of its name): its name
 * still exists, so a kernel that reached it through that name should look
 * the name up again (ESTALE), not be told the name is gone. 0 if not, or
 * not lately (the last 1024 such pages are remembered). */
int meta_page_replaced(struct meta *m, uint64_t page_id);

/* A reservation: a slot held for one writer until commit or abort. */
struct meta_resv {
	uint32_t pool_id;
	uint64_t page_id; /* the page's id (the replaced page's id for O_TRUNC) */
	uint64_t slot;
	uint64_t slot_size;
	int replace; /* 1: replaces committed page page_id in place */
};

/*
 * Reserves a slot for a new page `name` in a pool, evicting the least
 * recently used unpinned page if the pool is full and eviction is on.
 * replace_id != 0 reserves a new slot for replacing that committed page
 * (open with O_TRUNC). Returns 0, -ENOSPC, -ENOENT, or a store errno.
 * The new page is invisible to lookups until meta_page_commit.
 */
int meta_page_reserve(struct meta *m, uint32_t pool_id, const char *name, uint64_t replace_id,
                      struct meta_resv *out);
/* The same for open(O_CREAT|O_EXCL): -EEXIST while the name has a
 * committed page or a writer creating one. */
int meta_page_reserve_excl(struct meta *m, uint32_t pool_id, const char *name,
                           struct meta_resv *out);
/*
 * Publishes a reservation as a committed page of `length` bytes with the
 * given checksum, atomically replacing a committed page of the same name.
 * Returns after the store made it durable: 0, or a negative errno, in which
 * case nothing was published and the slot was given back.
 */
int meta_page_commit(struct meta *m, const struct meta_resv *r, uint64_t length, uint64_t checksum);
/* meta_page_commit of n reservations at once, err[i] its result: their
 * records go to the store together (one transaction where nothing else
 * splits them), and it returns when all are durable. */
void meta_page_commit_many(struct meta *m, const struct meta_resv *r, const uint64_t *length,
                           const uint64_t *checksum, size_t n, int *err);
/* Gives back a reservation that will never commit. */
void meta_page_abort(struct meta *m, const struct meta_resv *r);

/*
 * Pins the current slot of committed page page_id against reuse and
 * refreshes recency. *verify is set when the reader must check the bytes
 * against the checksum (per the mount's --verify). 0 or -ENOENT.
 */
int meta_page_pin(struct meta *m, uint64_t page_id, struct meta_page_info *out, int *verify);
/*
 * Looks up committed page `name` of a pool and pins its slot, in one step
 * under meta.lock: a lookup by name (recency refreshed, a hit or a miss
 * counted) whose answer stays true of the slot until meta_slot_unpin. For
 * readers that take a page's bytes from the data file themselves (the
 * batch pin of fs_ioctl.c). 0 or -ENOENT.
 */
int meta_page_lookup_pin(struct meta *m, uint32_t pool_id, const char *name,
                         struct meta_page_info *out);
/*
 * Before the bytes of a slot are read or written: 0 while this node is
 * surely still a node of its shared index (a heartbeat renewed its lease
 * less than 1.5 s ago), so that no other node writes into the slots its
 * mirror names or its chunks hold. Otherwise waits (up to 10 s) for a
 * heartbeat that renews it; -EIO when the node was removed (its lease ran
 * out while it was stopped or cut off) or none renewed in time. An index
 * of one daemon: 0. Takes no lock while the lease is sure (lease.c).
 */
int meta_lease_hold(struct meta *m);
/*
 * Gives committed page page_id a new version, its bytes unchanged: a new
 * inode number for fs/, whose kernel caches of the old one must not meet
 * a writer (fs_file.c). 0 or -ENOENT.
 */
int meta_page_new_version(struct meta *m, uint64_t page_id, struct meta_page_info *out);
/* Drops a pin taken by meta_page_pin. */
void meta_slot_unpin(struct meta *m, uint32_t pool_id, uint64_t slot);
/*
 * Reports a verification result for (page_id, slot). ok=1 marks it
 * verified; ok=0 counts a checksum failure, logs it and drops the page
 * from the index (durably) if the slot is still its current one.
 */
void meta_page_verified(struct meta *m, uint64_t page_id, uint64_t slot, int ok);
/*
 * The verdict on page p from a read of its bytes (meta_checksum_*) that
 * returned read_ret with checksum sum: 0 verified, -EIO failed (bytes that
 * do not match, or are gone: -ENODATA; meta_page_verified drops it), or
 * read_ret itself when the read failed (the backing's error: no verdict,
 * the page stays unverified and the next read tries again).
 */
int meta_page_verdict(struct meta *m, const struct meta_page_info *p, int read_ret, uint64_t sum);

/* Removes a committed page: 0 or -ENOENT. Durable on return. */
int meta_page_unlink(struct meta *m, uint32_t pool_id, const char *name);
/* Renames within a pool, replacing any target unless noreplace (-EEXIST).
 * 0, -ENOENT. Durable on return. */
int meta_page_rename(struct meta *m, uint32_t pool_id, const char *from, const char *to,
                     int noreplace);

/*
 * A writer's name operations on a page it is still writing (fs/ knows
 * which writer asks; docs/DECISIONS-posix.md). None touches the store:
 * an unpublished page has no row.
 *
 * meta_page_pending: the ids of the pages of (pool_id, name) being
 * written, at most max into ids; returns how many there are.
 * meta_page_unlink_pending: page_id leaves its name; its commit then
 * publishes nothing (meta_page_commit returns 0 and gives the slot back).
 * 0, or -ENOENT (committed, gone, or unlinked already).
 * meta_page_rename_pending: page_id takes name `to`, under which its
 * commit publishes it (replacing a committed page of that name then).
 * noreplace: -EEXIST while `to` has a committed page. 0, -ENOENT, -EINVAL,
 * -ENAMETOOLONG, -ENOMEM.
 */
int meta_page_pending(struct meta *m, uint32_t pool_id, const char *name, uint64_t *ids, int max);
int meta_page_unlink_pending(struct meta *m, uint64_t page_id);
int meta_page_rename_pending(struct meta *m, uint64_t page_id, const char *to, int noreplace);

/*
 * Calls cb for each committed page of a pool with id > after_id, in id
 * order, until cb returns non-zero (that value is returned) or the pool
 * ends (0). The page list is read from the store, never under a lock that
 * blocks writers; pages removed meanwhile may be reported once more.
 */
typedef int (*meta_page_cb)(void *arg, const struct meta_page_info *p);
int meta_page_iter(struct meta *m, uint32_t pool_id, uint64_t after_id, meta_page_cb cb, void *arg);

/* ---- page bytes ---- */

/* XXH3-64 of len bytes of fd at off, read in chunks. 0 or -errno:
 * -ENODATA when the file ends before off + len (the bytes are gone),
 * another errno when a read failed (the backing's error: the bytes may
 * still be there). */
int meta_checksum_range(int fd, uint64_t off, uint64_t len, uint64_t *out);
/* The same checksum from one read of the range into buf (len bytes),
 * which keeps the bytes for the caller. */
int meta_checksum_read(int fd, uint64_t off, uint64_t len, void *buf, uint64_t *out);

/* ---- offline check ---- */

struct meta_fsck_opts {
	const char *uri;     /* the index */
	const char *backing; /* the backing directory */
	int repair;          /* fix what can be fixed without inventing data */
	int verify_data;     /* read every page and check its checksum */
	/* One call per problem found: code, what is wrong, the fix, and
	 * whether it was repaired. */
	void (*report)(void *arg, const char *code, const char *what, const char *fix,
	               int repaired);
	/* Progress of long passes (may be NULL). */
	void (*progress)(void *arg, const char *pass, uint64_t done, uint64_t total);
	void *arg;
};

struct meta_fsck_result {
	uint64_t pools, pages, problems, repaired;
};

/*
 * Checks an index against its data files with no daemon running (takes
 * the index lock). Returns 0 when the check ran (problems are in *res), or
 * a negative errno with a message in err when it could not run.
 */
int meta_fsck(const struct meta_fsck_opts *o, struct meta_fsck_result *res, char *err,
              size_t errlen);

/* ---- bulk adoption and the SGLang state file (adopt.c, state_json.c) ---- */

struct meta_adopt_page {
	uint32_t pool_id; /* an existing pool with no pages, reservations or pins */
	uint64_t slot;    /* below the pool's capacity, one page per slot */
	const char *name; /* a valid page name, unique within its pool */
};

/*
 * Commits n pages (to pools that hold nothing else) in one store
 * transaction: all or nothing. Each page's length is its pool's slot size
 * and it has no checksum (one is computed on its first read). Pages are
 * given increasing atimes in array order per pool, so in[0] is the least
 * recently used. progress (may be NULL) is called from the batch writer
 * as rows reach the store. Returns 0, -EBUSY (a pool is not empty),
 * -ERANGE (slot beyond capacity), -EINVAL (two pages on one slot, a bad
 * name), -ENOENT (no such pool), or a store errno.
 */
int meta_adopt(struct meta *m, const struct meta_adopt_page *in, size_t n,
               void (*progress)(void *arg, uint64_t done, uint64_t total), void *arg);

struct meta_json_opts {
	const char *file;   /* import: the persistence file; export: NULL = stdout */
	uint64_t page_size; /* import: slot size of new pools; 0 = derive (see below) */
	void (*progress)(void *arg, const char *what, uint64_t done, uint64_t total);
	void *arg;
};

struct meta_json_result {
	uint64_t pools, keys;
};

/*
 * Adopts a mini_3fs_metadata_server persistence file ({"rank:namespace":
 * {"num_pages", "free_pages", "key_to_index"}}; a key without ':' means
 * ":kv") into the index, all or nothing: every pool and key is checked
 * before anything changes. The slot size of a pool is o->page_size, else
 * the existing pool's, else the pool's data file size / num_pages as
 * SGLang sizes it (num_pages = file_size // bytes_per_page); a mismatch is
 * refused. Returns 0, or a negative errno with a message in err (a
 * malformed file names the line and column).
 */
int meta_import_json(struct meta *m, const struct meta_json_opts *o, struct meta_json_result *res,
                     char *err, size_t errlen);
/*
 * Writes the index as a persistence file the Python server loads (4-space
 * indent; free_pages = unused slots ascending; key_to_index oldest use
 * first) to o->file (through FILE.tmp and a rename) or stdout. Names that
 * are not UTF-8 cannot be JSON keys: they are skipped and counted in err.
 */
int meta_export_json(struct meta *m, const struct meta_json_opts *o, struct meta_json_result *res,
                     char *err, size_t errlen);

/* ---- the mini_3fs_metadata_server key protocol (keys.c) ---- */

/*
 * SGLang's HiCacheHF3FS keeps pages in a pool's data file at
 * slot * slot_size and asks an index for slots by key. These calls are
 * that index, on the same pages the FUSE tree shows. keys are arrays of n
 * NUL-terminated page names. A reserved slot is held (and never evicted)
 * until confirmed, released, or reserve_timeout passes. Slots freed by
 * delete, clear or eviction wait out a quarantine (longer than SGLang's
 * 5 s client timeout: readers are not pinned) before reuse; a background
 * evictor keeps some slots of every protocol pool free or in quarantine.
 */
struct meta_keys_tuning {
	int64_t reserve_timeout_ns; /* default 60 s */
	int64_t quarantine_ns;      /* default 6 s; never below 5 s */
	uint32_t headroom_pct;      /* evictor keeps this % free (default 2, min 1 slot) */
};
void meta_keys_tune(struct meta *m, const struct meta_keys_tuning *t);

/*
 * Creates pool (rank, ns) with num_pages slots if missing (slot size: the
 * pool setting, else data file size / num_pages when the data file
 * exists, else the mount default). An existing pool keeps its size; a
 * different num_pages is logged (*differs = 1), never applied. Returns 0,
 * -EINVAL, -EMSGSIZE (data file size does not fit num_pages: msg says why).
 */
int meta_keys_initialize(struct meta *m, int rank, const char *ns, uint64_t num_pages, int *differs,
                         char *msg, size_t msglen);
/* SGLang's bytes per page for a data file of size bytes and n pages
 * (n = size // bpp): size / n when exact or the only fit, else 0. */
uint64_t meta_page_size_of(uint64_t size, uint64_t n);
/* The pool of (rank, ns) for the calls below: 0 or -ENOENT. */
int meta_keys_pool(struct meta *m, int rank, const char *ns, uint32_t *pool_id);
/* out[i] = 1 if keys[i] is a committed page (recency unchanged). */
int meta_keys_exists(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                     uint8_t *out);
/*
 * existed[i] = 1, slot[i] = its slot for a committed key (recency
 * refreshed); else a reserved slot (from the top of the pool downwards),
 * the same one for a key repeated in the batch, or -1 when no slot is free.
 */
int meta_keys_reserve(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                      uint8_t *existed, int64_t *slot);
/*
 * Publishes keys[i] at slots[i] (a slot this protocol reserved) as
 * committed pages of slot size without checksum, durably before return,
 * then returns released slots that no key maps and that are reserved. A
 * confirm naming a slot that is not reserved, or a release of a slot a
 * page maps, is ignored and logged. Counts of ignored entries in *ignored.
 */
int meta_keys_confirm(struct meta *m, uint32_t pool_id, const char *const *keys,
                      const int64_t *slots, size_t n, const int64_t *release, size_t nrel,
                      size_t *ignored);
/* Removes the committed keys (durably); *deleted counts them. */
int meta_keys_delete(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                     size_t *deleted);
/* Removes every page and reservation of the pool (durably). */
int meta_keys_clear(struct meta *m, uint32_t pool_id);
/* slot[i] = the slot of keys[i] (recency refreshed) or -1 when missing. */
int meta_keys_get(struct meta *m, uint32_t pool_id, const char *const *keys, size_t n,
                  int64_t *slot);

/*
 * Computes and records the checksum of a page that has none (written by
 * the key protocol or imported) once its bytes were read whole; a later
 * read verifies against it. No-op if the page changed meanwhile.
 */
void meta_page_set_checksum(struct meta *m, uint64_t page_id, uint64_t slot, uint64_t checksum);

/* ---- counters ---- */

void meta_count_io(struct meta *m, uint32_t pool_id, uint64_t read, uint64_t written);
void meta_get_stats(struct meta *m, struct meta_stats *out);
/* The mount's settings as opened (for status and xattrs). */
const struct meta_config *meta_config(struct meta *m);

#endif
