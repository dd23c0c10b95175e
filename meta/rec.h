/*
 * rec.h - the records the journal makes durable and the store applies.
 *
 * Plain structs (no pointer into the index): the store engines (meta/store/)
 * read them, the record layer (meta/record/) makes and applies them. A bulk
 * record hands its pages to the store through a row callback.
 */
#ifndef PAGEFS_META_REC_H
#define PAGEFS_META_REC_H

#include "meta/meta.h"

#include <stddef.h>
#include <stdint.h>

/* The stores' gen column holds the mount epoch in its low 32 bits and
 * the page's version above them, so that a rewritten page keeps its
 * inode number across a remount (an index from before keeps version 0;
 * a binary from before reads the low 32 bits only). */
static inline int64_t gen_column(uint32_t gen, uint16_t version)
{
	return (int64_t)gen | (int64_t)version << 32;
}

static inline uint32_t gen_of_column(int64_t col)
{
	return (uint32_t)col;
}

static inline uint16_t version_of_column(int64_t col)
{
	return (uint16_t)((uint64_t)col >> 32);
}

/* Slots per chunk of a pool of that many slots: 64, or fewer for small
 * pools (at least 32 chunks), so that several nodes share one; a power of
 * two dividing 64. Every node computes the same. */
static inline uint32_t pool_chunk_slots(uint64_t capacity)
{
	uint32_t k = 64;

	while (k > 1 && capacity / k < 32)
		k /= 2;
	return k;
}

/* ---- records the journal makes durable, in submission order ---- */

enum rec_type {
	REC_COMMIT,   /* page row: delete other same-name rows, upsert by id */
	REC_UNLINK,   /* delete page by id; apply frees its slot */
	REC_DROP,     /* delete page by id; already gone from memory */
	REC_RENAME,   /* rename page id to name, replacing other same-name rows */
	REC_TOUCH,    /* atime update; no ticket */
	REC_POOL_PUT, /* insert or update a pool row (and its rank) */
	REC_POOL_DEL,
	/* shared index: marks an empty pool's row as being removed (a
	 * tombstone: no commit or lease lands in it any more), after checking
	 * in the index that it holds no page and no other node may still
	 * read it; -ENOTEMPTY, or -EAGAIN to try again (pool.c) */
	REC_POOL_RETIRE,
	REC_RANK_PUT,
	REC_RANK_DEL,
	REC_SETTING,  /* settings key = value */
	REC_BULK,     /* many new pages of empty pools, all or nothing (import) */
	REC_CHECKSUM, /* first checksum of a page committed without one */
	REC_LEASE,    /* shared index: lease a chunk of 64 free slots of a pool */
	REC_RELEASE,  /* shared index: give a drained chunk back (handover) */
	/* SQLite index: delete record page_id of the page log, one that does
	 * not decode (fsck's repair; memory holds none of its pages) */
	REC_LOG_DROP,
};

/* REC_LEASE results besides 0 (a chunk with free slots) and errors. */
#define LEASE_FULL 1  /* an unheld chunk without a free slot: evict in it */
#define LEASE_ASKED 2 /* none unheld; a handover was asked of a node over its share */

/* REC_BULK: the pages (allocated, not linked) and a progress callback the
 * batch writer calls as rows reach the store. */
struct page;
struct bulk;

/* A page of a bulk record as the store writes it. */
struct bulk_row {
	uint64_t id, slot, length, checksum;
	uint32_t pool_id;
	int has_checksum;
	int64_t mtime_ns, atime_ns;
	int64_t gen; /* gen_column() */
	uint16_t name_len;
	char name[META_NAME_MAX + 1];
};

struct bulk {
	struct page **pages; /* opaque to the store: it reads them through row */
	/* Page i as a row (set by record_submit; the store calls it). */
	void (*row)(const struct bulk *b, size_t i, struct bulk_row *out);
	uint32_t *hash; /* of each page's name (index_name_hash) */
	size_t n;
	void (*progress)(void *arg, uint64_t done, uint64_t total);
	void *arg;
	/* Set by the batch writer for the SQLite store (replaced.c): page i
	 * replaces the rows repl[repl_at[i] .. repl_at[i + 1]). */
	const uint64_t *repl;
	const uint32_t *repl_at;
};

struct rec {
	struct rec *next;
	enum rec_type type;
	uint64_t seq;
	uint64_t xid; /* shared index: the store transaction that wrote it */
	int err;      /* set by the writer: 0 or -errno */
	int done;
	int waited; /* a submitter waits: it frees the record */
	/* REC_DROP: slot to free once durable; handoff = a writer took it;
	 * the page's index_name_hash (replaced.c); a slot to free too (has_extra:
	 * a rewrite of the page applied after it left memory, apply.c) */
	uint64_t drop_slot, extra_slot;
	int handoff, has_extra;
	uint32_t drop_hash;
	/* page fields (COMMIT/UNLINK/DROP/RENAME/TOUCH) */
	uint32_t pool_id;
	uint64_t page_id, slot, length, checksum;
	int has_checksum;
	int64_t mtime_ns, atime_ns;
	uint32_t gen;
	uint16_t version; /* the page's version once this commit is applied */
	/* REC_COMMIT of a committed page (O_TRUNC): its row, if still there,
	 * keeps the name it has by then (a rename may come first); the store
	 * then sets in_place and puts that name in name */
	int replace, in_place;
	/* pool fields (POOL_PUT/DEL, RANK_*) */
	uint16_t rank;
	/* POOL_PUT on a shared index: the new capacity changes the pool's
	 * chunk size (pool_chunk_slots), which the store allows only while
	 * no node holds a chunk of it and it has no page (else -EBUSY). */
	uint16_t rechunk;
	uint64_t slot_size, capacity;
	int pool_update; /* POOL_PUT: changes an existing pool (never re-creates it) */
	char ns[META_NS_MAX + 1];
	char key[32];
	char value[256];
	struct bulk *bulk; /* REC_BULK only; owned by the submitter */
	/* REC_LEASE: the pool's slots per chunk (set by the submitter); the
	 * chunk leased (slots chunk * chunk_slots ...), its slots named by
	 * pages and those freed but still in their grace period (reusable
	 * once every node acked grace_xid), bit i = slot i of the chunk. */
	uint64_t chunk_slots, chunk, used_bits, grace_bits, grace_xid;
	uint64_t pinned_bits;    /* REC_LEASE: slots of it a reader on some node pins */
	uint64_t capacity_slots; /* REC_LEASE: the pool's capacity in slots */
	uint64_t lease_from;     /* REC_LEASE: the chunk to start looking at (0: anywhere) */
	int ask;                 /* REC_LEASE: may ask for a handover (--evict lru) */
	/* REC_RELEASE: chunk, and in grace_bits the slots of it readers
	 * here pin. */
	uint16_t name_len;
	char name[META_NAME_MAX + 1];
	/* REC_COMMIT / REC_RENAME: the rows this one replaces, the ones the
	 * store must delete (by id, if they still have this name). The SQLite
	 * index has no (pool, name) index to find them by name; memory knows
	 * them (replaced.c). replaced_id: the committed
	 * page of that name when the record was submitted (record_note_replaced);
	 * repl[0 .. nrepl): every candidate, set by the batch writer. */
	uint64_t replaced_id;
	const uint64_t *repl;
	uint32_t nrepl;
};

#endif
