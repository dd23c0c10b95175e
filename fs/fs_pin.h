/*
 * fs_pin.h - pins and reservations held by an open pool directory: the
 * batch pin of the ioctl channel (fs_ioctl.c) and batch writes
 * (fs_batchw.c).
 *
 * A client that reads page bytes from the data file itself asks the pool
 * directory it holds open to pin a batch of pages (LOOKUP_PIN): each found
 * page's slot is pinned, as an open of the page would pin it, and the set
 * of pins is kept by the directory's handle under a token. UNPIN with the
 * token drops them; so does closing the directory (releasedir), which the
 * kernel does for a client that dies, and unmount. One request pins a
 * batch and one unpins it, where an open and a release per page did.
 *
 * Each handle has its own mutex, a leaf like the handle table's: no meta_*
 * call is made while it is held (pins are dropped after the set is taken
 * off the handle). The mount's list of handles has another leaf mutex.
 */
#ifndef PAGEFS_FS_PIN_H
#define PAGEFS_FS_PIN_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "meta/meta.h"

/* Pins one directory handle may hold at once: a client that keeps pins
 * keeps slots from reuse, so a forgetful one is refused (EBUSY) before it
 * can pin a whole pool. */
#define FS_PIN_MAX (1U << 16)

struct fs_pinset;

/* Reservations a batch write holds (fs_batchw.c): one entry per name of
 * a RESERVE request; err 0 where r is held, else why the name got none. */
struct fs_resvset {
	struct fs_resvset *next;
	uint64_t token;
	size_t n;
	struct fs_resv_ent {
		struct meta_resv r;
		int err;
	} e[];
};

/* An open pool directory (fi->fh of opendir). */
struct fs_dirh {
	struct fs_dirh *prev, *next; /* the mount's list, under fs_pins.lock */
	pthread_mutex_t lock;        /* guards what follows */
	struct fs_pinset *sets;
	uint64_t next_token;
	size_t npins;
	struct fs_resvset *resvs; /* batch writes between RESERVE and COMMIT */
	size_t nresv;
};

/* The open pool directories of a mount. */
struct fs_pins {
	pthread_mutex_t lock;
	struct fs_dirh *head;
};

int fs_pins_init(struct fs_pins *t);
/* Drops the pins of every directory still open (unmount), then frees. */
void fs_pins_close_all(struct fs_pins *t, struct meta *m);
void fs_pins_destroy(struct fs_pins *t);

/* A handle for an opened pool directory, on the mount's list; NULL when
 * out of memory. */
struct fs_dirh *fs_dirh_new(struct fs_pins *t);
/* Drops all of d's pins, takes it off the list and frees it. */
void fs_dirh_free(struct fs_pins *t, struct meta *m, struct fs_dirh *d);

/* Gives d the n slots of pool pool_id just pinned (n may be 0). 0 with
 * *token set; -EBUSY when d would hold more than FS_PIN_MAX pins, or
 * -ENOMEM: the caller still holds the pins then and must drop them. */
int fs_dirh_keep(struct fs_dirh *d, uint32_t pool_id, const uint64_t *slots, size_t n,
                 uint64_t *token);
/* Drops the pins kept under token: 0, or -EINVAL for a token d does not
 * hold (never given, or dropped already). */
int fs_dirh_drop(struct fs_dirh *d, struct meta *m, uint64_t token);

/* Gives d the reservation set s (malloc'd; d frees it, aborting what it
 * still holds, when the directory closes): 0 with *token set, after which
 * s is d's; -EBUSY when d would hold more than FS_PIN_MAX reservations
 * (the caller still owns s then). */
int fs_dirh_keep_resv(struct fs_dirh *d, struct fs_resvset *s, uint64_t *token);
/* Takes the reservation set kept under token off d: the caller commits or
 * aborts each and frees it. NULL for a token d does not hold. */
struct fs_resvset *fs_dirh_take_resv(struct fs_dirh *d, uint64_t token);
/* Aborts what s holds and frees it. */
void fs_resvset_abort(struct meta *m, struct fs_resvset *s);

#endif
