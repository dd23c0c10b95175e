/*
 * index.h - the in-memory index: pages, pools, names, slots, LRU lists.
 *
 * The lowest layer with a struct meta (meta/index/). Everything here lives
 * in memory under one mutex, meta.lock; critical sections are a few hash
 * probes long and never do I/O. Nothing here writes the store or reaches
 * the layers above: a layer above that wants to hear of an event (a slot
 * freed, a writer refused, a heartbeat wanted) installs a hook in
 * struct meta_hooks or struct cluster_ops. docs/DESIGN.md draws the layers
 * and lists every lock.
 */
#ifndef PAGEFS_META_INDEX_H
#define PAGEFS_META_INDEX_H

#include "meta/lock.h"
#include "meta/meta.h"
#include "meta/rec.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "meta/meta.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

struct store;
struct store_change;
struct store_pool_row;
struct sync;
struct journal;
struct keys;

/* A page: committed (in its pool's LRU) or being written (pending).
 * Pages live in the arena (arena.c) and link to each other by 32-bit
 * references (page_at, page_ref; 0 is none). 54 bytes before the name
 * (DESIGN.md "Memory"): ids in 48 bits (fs/ keeps 48 in an inode number
 * anyway), the mtime in 48 (page_mtime), the atime in whole seconds, no
 * hash of the name (index_page_name_hash computes it again where a page's own
 * bucket is wanted) and no link for the table by id (idtable.c). */
struct page {
	uint64_t id : 48;      /* <= META_PAGE_ID_MAX */
	uint64_t version : 16; /* in-place replacements (wraps); kept: gen_column */
	uint64_t checksum;
	uint32_t atime_s;            /* last use, in seconds (page_secs) */
	uint32_t slot;               /* < its pool's capacity <= META_SLOTS_MAX */
	uint32_t length;             /* <= its pool's slot size <= META_SLOT_SIZE_MAX */
	uint32_t lru_prev, lru_next; /* pool LRU, head = most recent; committed only */

	/* What a name lookup reads, last and next to each other: a chain walk
	 * reads the link and the name of each page, a match these fields from
	 * gen on too: 54 - 36 bytes and the name, one or two lines
	 * (page_prefetch_lookup). */
	uint32_t gen : 28; /* mount epoch it was made in (PAGE_GEN_MASK) */
	uint32_t committed : 1;
	uint32_t has_checksum : 1;
	uint32_t verified : 1;  /* checksum verified since commit/mount */
	uint32_t opened : 1;    /* committed: a reader opened this version;
	                         * not committed: page_orphaned */
	uint64_t mtime_q : 48;  /* commit time in 2^-16 s (page_mtime) */
	uint64_t pool_ix : 16;  /* its pool: page_pool() (pool_index.c) */
	uint32_t name_next;     /* meta.by_name chain */
	uint8_t name_len;       /* of the name as text (<= META_NAME_MAX) */
	uint8_t hex_bytes : 7;  /* bytes of leading digits held packed: pname.c */
	uint8_t name_tail : 1;  /* the rest is an interned tail's id (tails.c) */
	unsigned char packed[]; /* the name as pname.c packs it, no NUL */
};

/* An mtime as struct page keeps it: in units of 2^-16 s (about 15 us,
 * META_MTIME_GRAIN_NS) since 1970, 48 bits (until 2106). Commits take
 * their time at this grain (page_mtime_grain), so the store and stat
 * agree. */
static inline uint64_t page_mtime_q(int64_t ns)
{
	if (ns <= 0)
		return 0;
	uint64_t s = (uint64_t)ns / 1000000000u, frac = (uint64_t)ns % 1000000000u;

	if (s > UINT32_MAX)
		return (1ULL << 48) - 1;
	return s << 16 | (frac << 16) / 1000000000u;
}

/* The ns of q, rounded up, so that page_mtime_q gives q back. */
static inline int64_t page_mtime_ns(uint64_t q)
{
	return (int64_t)((q >> 16) * 1000000000u + (((q & 0xffffu) * 1000000000u + 0xffffu) >> 16));
}

static inline int64_t page_mtime(const struct page *p)
{
	return page_mtime_ns(p->mtime_q);
}

static inline void page_set_mtime(struct page *p, int64_t ns)
{
	p->mtime_q = page_mtime_q(ns);
}

/* ns down to what struct page can keep: the time a commit records. */
static inline int64_t page_mtime_grain(int64_t ns)
{
	return page_mtime_ns(page_mtime_q(ns));
}

/* struct page keeps 28 bits of a mount epoch (what FUSE gets as an inode
 * generation; ids are never reused, so it only has to be stable). */
#define PAGE_GEN_MASK 0x0fffffffu

/* Leading lowercase hex digits of p's name held packed (pname.c). */
static inline size_t pname_hex(const struct page *p)
{
	return (size_t)p->hex_bytes * 2u;
}

/* tails.c: texts after the hex digits of names, interned (ids 1 to
 * TAILS_MAX; 0: not interned: empty, over 255 bytes or the table full). */
#define TAILS_MAX 65535u
uint16_t index_tail_intern(const char *s, size_t len);
const char *index_tail_text(uint16_t id, size_t *len);

/* arena.c: where pages live; a piece is at most ARENA_MAX_PIECE bytes. */
#define ARENA_MAX_PIECE 512u
extern unsigned char *arena_base;
void *index_arena_alloc(size_t size); /* zeroed; NULL when the arena is full */
void index_arena_free(void *p, size_t size);
size_t index_arena_live(void); /* pieces allocated and not freed, process-wide */

/* The page a reference names, or NULL. */
static inline struct page *page_at(uint32_t ref)
{
	return ref ? (struct page *)(void *)(arena_base + (size_t)ref * 8u) : NULL;
}

/* The reference of p (NULL: 0). */
static inline uint32_t page_ref(const struct page *p)
{
	return p ? (uint32_t)(((const unsigned char *)p - arena_base) / 8u) : 0;
}

/* A time in nanoseconds as struct page keeps an atime: whole seconds,
 * within 0 .. 2^32 - 1 (until 2106). A use in another second than the
 * one before notes the page for the store (ops_page_touch), so the store had
 * no finer atimes to give anyway. */
static inline uint32_t page_secs(int64_t ns)
{
	int64_t s = ns / 1000000000LL;

	return s < 0 ? 0 : s > (int64_t)UINT32_MAX ? UINT32_MAX : (uint32_t)s;
}

/* Starts loading the line a chain walk reads of p. */
static inline void page_prefetch_chain(const struct page *p)
{
	__builtin_prefetch(&p->name_next);
}

/* Starts loading what a lookup of a name of len characters reads of p if
 * it matches: the fields from gen on (right after lru_next) and at most
 * len / 2 bytes of packed name (one or two lines). */
static inline void page_prefetch_lookup(const struct page *p, size_t len)
{
	__builtin_prefetch((const char *)(&p->lru_next + 1));
	__builtin_prefetch((const char *)p->packed + len / 2);
}

/* A pinned slot: readers or a deferred free. */
struct pin {
	struct pin *next;
	uint64_t slot;
	uint32_t count;
	uint8_t zombie; /* its page is gone: free the slot at count 0 */
	uint8_t quar;   /* of count, the protocol's quarantine (0 or 1) */
};

#define PIN_BUCKETS 64

/* A chunk of slots this node holds (shared index). inflight: slots of it
 * reserved by writers and not committed or aborted yet; a draining chunk
 * is being handed to another node: nothing more is allocated in it, and
 * it is released once inflight is 0 (releasing: the release is queued). */
struct held_chunk {
	uint64_t chunk;
	uint32_t inflight;
	uint8_t draining, releasing;
};

/* A freed slot of a leased chunk, reusable once every node acked xid. */
struct grace {
	uint64_t slot;
	uint64_t xid;
};

struct pool {
	struct pool *next; /* meta.pools list */
	uint32_t id;
	uint16_t ix; /* in pool_index (pool_index.c): what its pages hold */
	uint16_t rank;
	char ns[META_NS_MAX + 1];
	uint64_t slot_size; /* bytes */
	uint64_t capacity;  /* slots */

	/* Slot allocation: bit set = slot not allocatable (page, reservation,
	 * pinned zombie, or waiting for the store). Slots >= hwm are free and
	 * untracked, so a pool of 16M slots costs nothing until used. */
	uint64_t *bits;
	uint64_t bits_words;
	uint64_t hwm;
	uint64_t nused;    /* set bits */
	uint64_t npins;    /* slots with a pin */
	uint64_t nzombies; /* of them, slots whose page is gone (freed at unpin) */
	uint64_t scan;     /* no clear bit below this index */
	/* Shared index: where the next chunk lease starts looking (after the
	 * last chunk leased), so a lease does not walk past the chunks this
	 * node already holds. */
	uint64_t lease_from;

	struct pin *pins[PIN_BUCKETS];
	struct page *lru_head, *lru_tail;

	uint64_t pages, bytes, pending;
	uint64_t hits, misses, evictions, checksum_failures;
	/* Writes refused a slot in a full pool (a protocol key answered -1, a
	 * FUSE write ENOSPC), and protocol confirms and releases ignored. */
	uint64_t refused, ignored;
	/* The directory's mtime and ctime: the last time a page joined or
	 * left its names or was replaced (dirtime.c); what a clean unmount
	 * last recorded of it. */
	int64_t dir_ns, dir_saved_ns;
	uint64_t bytes_read, bytes_written;

	/* Shared index only (chunks.c): the chunks of 64 slots this node
	 * leased (allocation stays inside them) and their freed slots that
	 * wait out a grace period. */
	uint8_t shared;
	uint8_t creating;  /* linked, its row not yet committed (sync.c keeps it) */
	uint8_t removing;  /* this node is removing it (pool.c) */
	uint8_t keep_file; /* its removal leaves the data file (ops_pool_remove) */
	/* Its row is gone from the index (or retired, see pool.c): hidden
	 * from every lookup, it stays linked only while writers or readers
	 * of this node still use its data file (resv, pending, pins), and is
	 * freed by ops_pool_reap once they are done. */
	uint8_t removed;
	uint32_t resv;        /* reservations held (meta_page_reserve .. commit/abort) */
	uint64_t created;     /* meta.pools_made when its row was committed here */
	uint32_t chunk_slots; /* slots per chunk: pool_chunk_slots(capacity) */
	struct held_chunk *chunks;
	size_t nchunks, chunks_cap;
	struct grace *grace;
	size_t ngrace, grace_cap;

	int fd;               /* data file, O_RDWR */
	uint8_t data_missing; /* at load: there was no data file */
	uint64_t data_size;   /* at load: its size */
	uint64_t load_end;    /* at load: where the bytes of its last page end */
	/* Slots held for reservations a daemon before this mount handed out
	 * (fence.c): free at mount, marked used until fence_end (monotonic);
	 * nfenced of them, counted in nused but not "used" (pool_used). */
	uint64_t *fence_bits, fence_words, nfenced;
	int64_t fence_end;
	int64_t fence_record; /* the record found at mount (wall-clock ns), fence.c */
	char *data_path;
	/* Its presence table in shared memory (presence.c), made at the first
	 * request for it; NULL until then. meta.lock. */
	struct presence *presence;
};

/* Ids handed out from blocks (a shared index takes them from database
 * sequences; one daemon alone counts from the highest id it loaded). */
struct idblock {
	uint64_t next, end;                /* [next, end) left in this block */
	uint64_t spare_first, spare_count; /* the next block, fetched ahead */
};

struct page_table {
	uint32_t *buckets; /* page references */
	uint64_t n;        /* buckets (table.c: any number) */
	uint64_t count;
	/* By name only: the pages batch lookups found lately, direct mapped
	 * by name hash (table.c, "recent"); NULL when there is none. */
	uint64_t *recent;
	/* By id only: pages of ids handed out since the load, by id
	 * (idsegs.c); count includes them. */
	struct idsegs *segs;
};

/* Renamed pages' ctimes by page id (dirtime.c); id 0: an empty entry. */
struct ctime_ent {
	uint64_t id;
	int64_t ns;
};

struct ctimes {
	struct ctime_ent *v;
	size_t cap, n; /* cap: a power of two, or 0 */
};

/* What the layers above the index hear from below: the SGLang key
 * protocol (meta/keys/, keys_hooks) and the nodes of a shared index
 * (meta/cluster/, cluster_ops). open.c installs them; a NULL table or
 * member means "not here": the single-node path without HTTP keys calls
 * none of that code. Every hook is called with meta.lock held. */
struct meta_hooks {
	/* A page's slot was freed in pool: 1 if the protocol took it into its
	 * quarantine (HTTP clients read slots they cannot pin), else 0. */
	int (*slot_freed)(struct meta *m, struct pool *pool, uint64_t slot);
	/* A FUSE writer of name found no free slot in pool: 1 if the protocol's
	 * evictor makes room there (the writer waits), 0: evict as usual. */
	int (*fuse_refused)(struct meta *m, struct pool *pool, const char *name);
	/* The keys refused a slot in pool that are owed one (0: none). */
	uint64_t (*owed)(struct meta *m, const struct pool *pool);
};

struct cluster_ops {
	/* Wakes the sync thread for a heartbeat soon (a chunk to lease or
	 * to hand back, a pool or rank row to publish). */
	void (*kick)(struct meta *m);
};

struct meta {
	pthread_mutex_t lock;         /* protects everything below but cfg */
	struct lock_owner lock_owner; /* who holds lock (lock.h; checked builds) */
	struct meta_config cfg;       /* immutable after open; strings owned */
	char *uri, *backing, *prefix, *presence_dir;
	char *db_path; /* the index as messages name it (no password) */

	struct pool *pools;
	uint64_t pools_made;    /* pools this node created (sync.c: stale reloads) */
	uint64_t pools_set;     /* pool settings this node changed (the same) */
	uint32_t pools_setting; /* of them, still on their way to the store */
	uint8_t ranks[(META_RANK_MAX + 1) / 8]; /* explicitly created ranks */

	struct page_table by_name; /* key: (pool id, name); chains via name_next */
	struct page_table by_id;   /* key: page id (idtable.c, idsegs.c) */
	struct idblock page_ids, pool_ids;
	/* Ids of the last 1024 pages another page took the name of
	 * (index_page_replaced, meta_page_replaced). */
	uint64_t replaced[1024];
	unsigned replaced_n;
	/* Pages this node itself linked or unlinked (its writers, evictions,
	 * unlinks, renames, and the apply of its own records), each with a
	 * sequence number: a feed row read before such a change is older than
	 * it (index_feed_mark, sync.c). feed_since: while a feed batch is
	 * applied, 1 + the sequence number when it was read; else 0. */
	struct {
		uint64_t id, seq;
	} local_recent[4096];
	uint64_t local_seq, feed_since;
	struct ctimes ctimes; /* renamed pages' ctimes (dirtime.c) */
	uint32_t epoch;

	/* Several daemons on one index (PostgreSQL): this is one node. */
	int shared;
	int fenced;          /* this node's lease was lost: no more writes */
	uint32_t live_nodes; /* as of the last heartbeat */
	struct sync *sync;   /* the sync thread (sync.c) */
	/* Until when (cluster_lease_clock) this node is surely still one (lease.c). */
	_Atomic int64_t lease_sure_until;
	pthread_mutex_t lease_lock; /* a leaf: guards lease_fenced, lease_cond */
	pthread_cond_t lease_cond;  /* a heartbeat renewed, or found the node gone */
	int lease_fenced;
	uint64_t (*peer_pins)[2]; /* (pool, slot) other nodes' readers pin, sorted */
	size_t npeer_pins;
	/* (pool, slot, until ns) pins a lease found in its chunk, kept until
	 * heartbeats have surely brought them into peer_pins (chunks.c). */
	uint64_t (*lease_pins)[3];
	size_t nlease_pins, lease_pins_cap;

	meta_drop_cb drop_cb;
	void *drop_arg;
	meta_dir_cb dir_cb; /* a rank or pool directory went (shared index) */
	void *dir_arg;
	/* sync.c: ranks this node is making (bit set, row not yet committed)
	 * and made, so that a reload read before the commit keeps them. */
	uint32_t ranks_busy;
	uint64_t ranks_made;

	struct store *store;
	struct journal *journal;
	struct keys *keys;                 /* key/slot protocol state (keys.c); NULL until used */
	const struct meta_hooks *hooks;    /* NULL: no key protocol */
	const struct cluster_ops *cluster; /* NULL: a single node */
};

struct dropped {
	struct dropped *next;
	uint32_t pool_id;
	uint64_t page_id;
	char name[];
};
void index_drops_notify(struct meta *m, struct dropped *d);
void index_drops_add(struct dropped **list, const struct page *p);
/* chunks.c (shared index; meta.lock held) */
/* Bits of a chunk's slots in the bitmap, and in *valid the mask of its
 * valid ones. */
uint64_t index_chunk_bits(const struct pool *p, uint64_t chunk, uint64_t *valid);
int index_chunk_owned(const struct pool *p, uint64_t chunk);
struct held_chunk *index_chunk_find(struct pool *p, uint64_t chunk);
int index_chunk_own(struct pool *p, uint64_t chunk);
/* A slot of a held chunk that is not draining, counted in flight until
 * index_chunk_done: 0 or -ENOSPC. */
int index_chunk_take(struct pool *p, uint64_t *slot);
/* The reservation of slot ended (committed or given back). */
void index_chunk_done(struct pool *p, uint64_t slot);
/* A released chunk leaves: its grace slots become plain mirror bits. */
void index_chunk_disown(struct pool *p, uint64_t chunk);
void index_grace_add(struct pool *p, uint64_t slot, uint64_t xid);
/* A page holds slot now: an earlier free of it no longer frees it. */
void index_grace_forget(struct pool *p, uint64_t slot);
/* Frees grace slots acked by every node (xid < min_ack) that nobody pins
 * here or in pins[] (pool id, slot). */
void index_grace_release(struct pool *p, uint64_t min_ack, const uint64_t (*pins)[2], size_t npins);
/* Slots pinned by readers here (whose page is gone or not): writes up
 * to max (pool id, slot) pairs to out (NULL: counts them); returns the
 * count. */
size_t index_slots_pinned(const struct pool *p, uint64_t (*out)[2], size_t max);
/* The slots other nodes' readers pin, as of the last heartbeat (takes
 * pins, malloc'd, over). */
void index_peer_pins_set(struct meta *m, uint64_t (*pins)[2], size_t n);
/* Pinned by a reader here, or elsewhere as of the last heartbeat. */
int index_slot_pinned_anywhere(const struct meta *m, const struct pool *p, uint64_t slot);
/* A lease found slot pinned by another node's reader: it counts as a
 * peer pin at once, before the next heartbeat lists it. */
void index_lease_pin_add(struct meta *m, uint32_t pool, uint64_t slot);
void index_chunks_free(struct pool *p);

static inline uint64_t chunk_of(const struct pool *p, uint64_t slot)
{
	return slot / p->chunk_slots;
}

/* A new id from a block: 0 when the block and its spare ran out. */
uint64_t index_id_take(struct idblock *b);
uint64_t index_id_left(const struct idblock *b);

/* ctimes.c (meta.lock held) */

/* A page joined or left pool's names, or was replaced, at ns. */
void index_pool_changed(struct pool *pool, int64_t ns);
/* A renamed page's ctime: set, look up (0: none), forget. */
void index_ctime_set(struct ctimes *t, uint64_t id, int64_t ns);
int64_t index_ctime_get(const struct ctimes *t, uint64_t id);
void index_ctime_del(struct ctimes *t, uint64_t id);
void index_ctimes_free(struct ctimes *t);
/* table.c */
int index_table_init(struct page_table *t, uint64_t buckets);
/* Gives t the cache of recent finds that index_table_find_names reads
 * first: INDEX_RECENT_ENTRIES entries, entry h % INDEX_RECENT_ENTRIES
 * holding hash h << 32 | the page's reference (0: none); 0 or -ENOMEM
 * (t works without). */
#define INDEX_RECENT_ENTRIES (1u << 19)
int index_table_recent_init(struct page_table *t);
void index_table_free(struct page_table *t);
/* g: an empty table of n buckets (at most 2^32; 0: half as many again as
 * t) and t's count; 0, or -1 when that is no more than t has or there is
 * no memory. */
int index_table_grown(const struct page_table *t, struct page_table *g, uint64_t n);
/* Rehashes t into buckets for `pages` pages at load factor 1, if it has
 * fewer; t stays as it is when there is no memory. */
void index_table_reserve(struct page_table *t, uint64_t pages);
/* The hash of a name in the table by name (and in batches). */
uint32_t index_name_hash(uint32_t pool_id, const char *name, size_t len);
/* The same for p's name, from the packed form (unpacks it: some 30 ns). */
uint32_t index_page_name_hash(const struct page *p);
/* Adds p, whose name hashes to h. */
void index_table_add_name(struct page_table *t, struct page *p, uint32_t h);
void index_table_del_name(struct page_table *t, struct page *p);
/* The committed page named so in the pool; *pending counts writers. */
struct page *index_table_find_name(const struct page_table *t, uint32_t pool_id, const char *name,
                                   int *pending);
/* The committed page of (pool_id, name) whose index_name_hash is h. */
struct page *index_table_find_hashed(const struct page_table *t, uint32_t h, uint32_t pool_id,
                                     const char *name, size_t len);
/* The committed page of b's name (in b's pool; it hashes to h), b
 * itself if committed. */
struct page *index_table_find_same(const struct page_table *t, const struct page *b, uint32_t h);
/* The ids of the pages of (pool_id, name) still being written, at most
 * max of them, into ids; returns how many there are (may exceed max). */
int index_table_find_pending(const struct page_table *t, uint32_t pool_id, const char *name,
                             uint64_t *ids, int max);
/* The same as index_table_find_name for n names at once (a NULL name finds
 * nothing); lens[i] is strlen(names[i]). */
void index_table_find_names(const struct page_table *t, uint32_t pool_id, const char *const *names,
                            const size_t *lens, size_t n, struct page **out);
/* Start loading what index_table_find_names would read for names[0..n) (of
 * lengths lens[0..n)), for lookups one at a time that follow
 * (index_table_find_hashed: they may drop meta.lock between); hs[i] is names[i]'s
 * hash (0 for a NULL name). */
void index_table_prefetch_names(const struct page_table *t, uint32_t pool_id,
                                const char *const *names, const size_t *lens, size_t n,
                                uint32_t *hs);
/* In a loop over pages[0..n) (whose names hash to hs[0..n)) that looks
 * each up by name (and, by_id not NULL, inserts it by id): call at each i
 * first. Loads buckets and chain heads of the pages a few steps ahead, so
 * their misses overlap. */
void index_table_prefetch_ahead(const struct page_table *by_name, const struct page_table *by_id,
                                struct page *const *pages, const uint32_t *hs, size_t n, size_t i);
/* Start loading the bucket a page of name hash h goes to: the load
 * inserts a group at a time (load.c). */
void index_table_prefetch_name(const struct page_table *t, uint32_t h);
/* The first page of the bucket of name hash h, or NULL. */
struct page *index_table_bucket_name(const struct page_table *t, uint32_t h);

/* idtable.c: pages by id (open addressing; by_id). index_idtable_init sizes
 * the table for pages pages; index_idtable_add aborts only when no memory was
 * found to grow it since it was 7/8 full. index_idtable_probes: the buckets a
 * lookup of each page reads, summed, and the most for one page. */
int index_idtable_init(struct page_table *t, uint64_t pages);
/* Rehashes t into the size index_idtable_init gives `pages`, if smaller. */
void index_idtable_reserve(struct page_table *t, uint64_t pages);
void index_idtable_add(struct page_table *t, struct page *p);
void index_idtable_del(struct page_table *t, struct page *p);
struct page *index_idtable_find(const struct page_table *t, uint64_t id);
void index_idtable_prefetch(const struct page_table *t, uint64_t id);
uint64_t index_idtable_probes(const struct page_table *t, uint64_t *longest);
/* From now on ids above the highest linked so far go to segments
 * (idsegs.c); called once the load is done. */
void index_idtable_seal(struct page_table *t);
/* Frees the table, and with free_pages every page in it. */
void index_idtable_free(struct page_table *t, int free_pages);

/* idsegs.c: the table by id's direct part, for idtable.c only. add and
 * del return 1 when the page is (was) there; del may move a segment's
 * other pages to the hashed part, each through rehash. */
int index_idsegs_init(struct idsegs **out);
void index_idsegs_seal(struct idsegs *s);
uint64_t index_idsegs_live(const struct idsegs *s);
uint64_t index_idsegs_ranges(const struct idsegs *s); /* directory entries */
struct page *index_idsegs_find(const struct idsegs *s, uint64_t id);
const void *index_idsegs_entry(const struct idsegs *s, uint64_t id);
int index_idsegs_add(struct idsegs *s, struct page *p);
int index_idsegs_del(struct idsegs *s, struct page *p, void (*rehash)(void *, struct page *),
                     void *arg);
void index_idsegs_free(struct idsegs *s, int free_pages);

/* pname.c: a page's name, packed. index_pname_plan works out how (interning
 * its tail) and returns the bytes of packed[] it takes; index_pname_set writes
 * it so into p. */
struct index_pname_plan {
	uint8_t hex;   /* leading digits packed */
	uint16_t tail; /* the interned tail's id, or 0 */
};
size_t index_pname_plan(const char *name, size_t len, struct index_pname_plan *plan);
void index_pname_set(struct page *p, const char *name, size_t len,
                     const struct index_pname_plan *plan);
/* Whether p is named name (len bytes). */
int index_pname_eq(const struct page *p, const char *name, size_t len);
/* Bytes of packed[] that p's name takes. */
size_t index_pname_stored(const struct page *p);
/* Whether a and b have the same name. */
int index_pname_same(const struct page *a, const struct page *b);
/* The name as text into out (name_len + 1 bytes); returns out. */
char *index_pname_text(const struct page *p, char *out);

/* page.c helpers shared with apply.c and load.c */
struct page *index_page_alloc(const char *name, size_t len); /* zeroed but for the name */
void index_page_free(struct page *p);
/* Slot, length, checksum and times from a store row (or record), and
 * unverified until its next read. */
void index_page_take_row(struct page *p, const struct rec *r);
/* Notes that p leaves because another page takes its name. meta.lock. */
void index_page_replaced(struct meta *m, const struct page *p);
void index_page_replaced_id(struct meta *m, uint64_t id);
/* The change feed against this node's own changes (meta.lock held):
 * index_feed_mark before a batch is read; index_feed_begin(mark) ..
 * index_feed_end around its apply; meanwhile index_page_local_since
 * tells whether this node linked or unlinked page id after the batch was
 * read (1), or cannot tell (-1: too many changes since), or not (0).
 * index_page_local notes such a change (pages.c calls it; apply.c for a
 * page rewritten in place). */
uint64_t index_feed_mark(struct meta *m);
void index_feed_begin(struct meta *m, uint64_t mark);
void index_feed_end(struct meta *m);
int index_page_local_since(const struct meta *m, uint64_t id);
void index_page_local(struct meta *m, uint64_t id);
/* A page still being written whose writer unlinked it: out of the name
 * table (nobody finds it by name; another page may take the name), in
 * the id table until its writer commits (which publishes nothing) or
 * aborts. The bit means "a reader opened it" only for committed pages,
 * and an orphan never commits. */
static inline int page_orphaned(const struct page *p)
{
	return !p->committed && p->opened;
}

static inline void page_set_orphaned(struct page *p)
{
	p->opened = 1;
}

/* A new version of p (a new inode in fs/): nobody has opened it yet. */
static inline void page_new_version(struct page *p)
{
	p->version++;
	p->opened = 0;
}
/* tables + LRU + counts; h: index_page_name_hash(p), which callers often
 * have; now_ns: the time of the change, for the pool directory's times (a
 * bulk of pages reads the clock once, index_now_ns) */
void index_page_link_committed(struct meta *m, struct page *p, uint32_t h, int64_t now_ns);
void index_page_link_loaded(struct meta *m, struct page *p, uint32_t h); /* the same, no LRU */
void index_page_unlink_committed(struct meta *m, struct page *p); /* reverse; keeps slot bit */
void index_lru_touch(struct pool *p, struct page *pg);
void index_lru_push_head(struct pool *p, struct page *pg); /* as the most recent */
int64_t index_now_ns(void);

/* pool_index.c: pools by 2-byte index, for pages (at most POOLS_MAX at
 * once in a process). index_pool_new: a zeroed pool entered in the table, or
 * NULL (errno ENOMEM or ENOSPC); index_pool_free takes it out. */
#define POOLS_MAX 65535u
extern struct pool *pool_index[POOLS_MAX + 1];
struct pool *index_pool_new(void);
void index_pool_index_drop(struct pool *p);

static inline struct pool *page_pool(const struct page *p)
{
	return pool_index[p->pool_ix];
}

static inline void page_set_pool(struct page *p, const struct pool *pool)
{
	p->pool_ix = pool->ix;
}

struct pool *index_pool_by_id(struct meta *m, uint32_t id);
struct pool *index_pool_by_name(struct meta *m, int rank, const char *ns);
/* A pool by id that lookups may see (not removed). */
struct pool *index_pool_live(struct meta *m, uint32_t id);
void index_pool_fill_info(const struct pool *p, struct meta_pool_info *out);
void index_pool_free(struct pool *p);
void index_pool_link(struct meta *m, struct pool *p);
void index_pool_unlink(struct meta *m, struct pool *p);
/* Its row left the index: hides the pool (its committed pages leave the
 * mirror, to drops) and frees it once nothing of this node uses it. */
struct gone_dir {
	struct gone_dir *next;
	int rank;
	char ns[META_NS_MAX + 1]; /* "" for the rank itself */
};
void index_dirs_add(struct gone_dir **list, int rank, const char *ns);
void index_dirs_notify(struct meta *m, struct gone_dir *d);
int index_rank_is_set(const struct meta *m, int rank);
int index_rank_has_pools(struct meta *m, int rank); /* any pool not removed */
void index_rank_set(struct meta *m, int rank, int on);

/* presence.c: a pool's table of the fingerprints of its committed
 * pages' names in a file of shared memory, for clients to probe without
 * a request (docs/DESIGN.md, "The presence table"). One writer: meta.lock
 * held (or the load, before anything else sees the index). */
struct presence;
struct presence_stats {
	uint64_t size, used, count, rebuilds, generation;
};
/* XXH64 of the name's bytes, seed 0, through index_presence_remap:
 * 0 and 1 (empty, tombstone) taken to 2 and 3. */
uint64_t index_presence_fp(const char *name, size_t len);
/* index_presence_fp of a page's name. */
uint64_t index_presence_page_fp(const struct page *p);
uint64_t index_presence_remap(uint64_t h);
/* A new empty table file in dir (mode: its permissions) for about pages
 * pages of pool pool_id, live; 0 or -errno. The caller owns *out. */
int index_presence_new(const char *dir, unsigned mode, uint32_t pool_id, uint64_t pages,
                       struct presence **out);
/* Retires the table (its live word 0: readers stop trusting it), removes
 * its file and frees it. NULL: nothing. */
void index_presence_free(struct presence *t);
/* Enters a fingerprint (rebuilding into a new generation when entries
 * and tombstones pass half the table); 0, or -errno when no new file
 * could be made (the table is as it was). */
int index_presence_add(struct presence *t, uint64_t fp);
/* Takes one entry of fp out (none: nothing). */
void index_presence_del(struct presence *t, uint64_t fp);
/* What a client's probe answers: 1 if fp is in the table. */
int index_presence_has(const struct presence *t, uint64_t fp);
/* The path of the current generation's file (owned by t). */
const char *index_presence_path(const struct presence *t);
void index_presence_stats(const struct presence *t, struct presence_stats *out);
/* Removes this user's table files in dir whose daemon is gone (kill -9). */
void index_presence_sweep(const char *dir);
/* p joins (in 1) or leaves (0) its pool's names: its pool's table, if
 * it has one, follows (pages.c calls it). */
void index_presence_page(struct page *p, int in);
/* The path of pool's table (owned by the pool), made now in dir with
 * mode and filled from its pages if it has none; 0 or -errno. */
int index_presence_pool(struct pool *pool, const char *dir, unsigned mode, const char **path);

/* slots.c */
int index_slot_take(struct pool *p, uint64_t *slot);    /* 0 or -ENOSPC */
int index_slot_mark(struct pool *p, uint64_t slot);     /* at load: 0, or -EEXIST if taken */
void index_slot_release(struct pool *p, uint64_t slot); /* bit clear: allocatable now */
void index_slot_put(struct pool *p, uint64_t slot);     /* page gone durably: free or zombie */
void index_slot_pin(struct pool *p, uint64_t slot);
void index_slot_unpin(struct pool *p, uint64_t slot);
int index_slot_pinned(const struct pool *p, uint64_t slot);
/* Shared index: a freed page slot HTTP clients may still read, held for
 * the protocol's quarantine: pinned, so that no node reuses it, and in
 * another node's chunk a zombie, so that its bit stays set here until
 * index_slot_unquarantine. 0, or -EEXIST: in the quarantine already. */
int index_slot_quarantine(struct pool *p, uint64_t slot);
void index_slot_unquarantine(struct pool *p, uint64_t slot);
int index_slot_quarantined(const struct pool *p, uint64_t slot);
/* Marks every free slot of p used until until_mono (index_slots_unfence gives
 * back those still held then). 0 or -ENOMEM. */
int index_slots_fence(struct pool *p, int64_t until_mono);
/* Gives the fenced slots back once their time is up (every allocation
 * asks first, while p->fence_bits is set). */
void index_slots_unfence(struct pool *p);
/* The slots of p that hold a page, a reservation or a slot on its way
 * back (nused but the held ones: they are free to status, df and rmdir). */
static inline uint64_t pool_used(const struct pool *p)
{
	return p->nused - p->nfenced;
}
/* Highest used slot + 1 (0 when none). */
uint64_t index_slot_top(const struct pool *p);
void index_slots_free(struct pool *p);

static inline int index_hook_slot_freed(struct meta *m, struct pool *pool, uint64_t slot)
{
	return m->hooks && m->hooks->slot_freed ? m->hooks->slot_freed(m, pool, slot) : 0;
}

static inline int index_hook_fuse_refused(struct meta *m, struct pool *pool, const char *name)
{
	return m->hooks && m->hooks->fuse_refused ? m->hooks->fuse_refused(m, pool, name) : 0;
}

static inline uint64_t index_hook_owed(struct meta *m, const struct pool *pool)
{
	return m->hooks && m->hooks->owed ? m->hooks->owed(m, pool) : 0;
}

static inline void index_cluster_kick(struct meta *m)
{
	if (m->cluster && m->cluster->kick)
		m->cluster->kick(m);
}

/* check.c: 0 when the index's structures agree with its counters (slot
 * bits, pins, LRU links, page and byte counts); else -EUCLEAN with the
 * first broken invariant in err. Walks every page. meta.lock held. */
int index_check(struct meta *m, char *err, size_t errlen);

/* meta.lock: take, release, and the preconditions that run (lock.h). */
static inline void index_lock(struct meta *m)
{
	pthread_mutex_lock(&m->lock);
	lock_taken(&m->lock_owner);
}

static inline void index_unlock(struct meta *m)
{
	lock_released(&m->lock_owner);
	pthread_mutex_unlock(&m->lock);
}

#define index_assert_locked(m) lock_assert_held(&(m)->lock_owner, "meta.lock")
#define index_assert_unlocked(m) lock_assert_not_held(&(m)->lock_owner, "meta.lock")

#endif
