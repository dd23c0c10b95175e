/*
 * pagefs_ioctl.h - the batch channel of a pagefs mount, for C clients: one
 * ioctl on an open pool directory answers for a batch of page names
 * (fs/fs_ioctl.c serves it; python/pagefs/_wire.py speaks it too).
 *
 * A request and its reply share one buffer of PAGEFS_IOC_SIZE bytes
 * (host byte order):
 *
 *   struct pagefs_ioc_hdr (magic PAGEFS_IOC_MAGIC, version 1, op, count,
 *   bytes), then `bytes` bytes of `count` NUL-terminated names.
 *
 * The reply, per op:
 *
 *   EXISTS: the header (bytes = count), then one byte per name: 1 if it
 *     is a committed page, else 0 (recency unchanged; an invalid name is 0).
 *   LOOKUP: the header (bytes = length of the data file path), u64 slot
 *     size, then a struct pagefs_ioc_rec per name, then the data file path
 *     and its NUL. Each found page's recency is refreshed and counted as a
 *     hit. Its offset is safe to read only while the page is held open
 *     through the mount (an open pins its slot), and only where the open
 *     file's inode number (fstat) is the record's.
 *   LOOKUP_PIN: LOOKUP, and each found page's slot is pinned until UNPIN:
 *     the header, u64 slot size, u64 token, the records (flags
 *     PAGEFS_IOC_PINNED), the path. The pins are held by the open
 *     directory; closing it (or the death of the client) drops them. EBUSY
 *     when the directory would hold more than 65,536 pins (nothing is
 *     pinned then).
 *   UNPIN: count 0, then `bytes` / 8 u64 tokens that LOOKUP_PIN gave
 *     through this open directory; their pins are dropped. The reply is
 *     the header. EINVAL if a token is not held (the others are still
 *     dropped).
 *   RESERVE: a slot for each name, held for a batch write (the client
 *     writes the page bytes into the data file itself, then COMMITs): the
 *     reply is laid out as LOOKUP_PIN's, a record's err 0 (its offset is
 *     the slot's), -EINVAL for a bad name, -ENOSPC for a full pool that
 *     evicts nothing. The reservations are held by the open directory
 *     under the token; closing it aborts them. EBUSY beyond 65,536.
 *   COMMIT: count n, bytes 8 + 16 n: the u64 token RESERVE gave, then per
 *     name of that request (in its order) u64 length and u64 checksum
 *     (the XXH3-64 of the length bytes at its slot), or length
 *     PAGEFS_IOC_ABORT to give the slot back. Each page is published as
 *     close() publishes one: whole or not at all, replacing a page of its
 *     name. The reply: the header (bytes = 4 n), then an int32 per name:
 *     0, or -errno (nothing published for it; -ECANCELED where aborted,
 *     -EFBIG for a length over the slot size, RESERVE's error where it
 *     held none). EINVAL for a token not held or an n that is not the
 *     RESERVE's: nothing of that batch is published then.
 *
 * The kernel copies PAGEFS_IOC_SIZE bytes in and out (the size is encoded
 * in the command). A reply that does not fit is E2BIG: send smaller
 * batches (PAGEFS_IOC_MAX_NAMES names always fit). Errors are the
 * ioctl's: EINVAL for a malformed request or an op the daemon does not
 * know, ENOTDIR on anything but a pool directory.
 *
 * Placed writes (PAGEFS_IOC_PLACE, struct pagefs_ioc_place, on a page
 * opened for writing through the mount: open(O_CREAT) or open(O_TRUNC)):
 * the writer puts the page's bytes into the data file itself, so they
 * cross no FUSE request of pagefs, and close() still publishes them at
 * once or not at all.
 *   WHERE: the reply's offset and slot_size say where the writer's slot
 *     is in the pool's data file (the pool directory's
 *     user.pagefs.data_file), pool_ino which pool that is (the inode
 *     number of its directory: a pool removed and made again has a new
 *     one, and a new data file). The slot stays the writer's until close.
 *   DONE: length and checksum (the XXH3-64 of the length bytes the writer
 *     put at offset): close() publishes them as the page, with that
 *     checksum and without reading them. A write() through the handle
 *     after DONE undoes it (the commit then reads the slot back for the
 *     checksum). EFBIG for a length over the slot size, EINVAL when bytes
 *     were already written through the handle or it is committed, EBADF
 *     on a handle not open for writing.
 * Readers check those bytes as they check any page's (a writer that put
 * other bytes than it summed gets its page read as a miss, never its
 * neighbours' bytes).
 */
#ifndef PAGEFS_IOCTL_H
#define PAGEFS_IOCTL_H

#include <stdint.h>
#include <sys/ioctl.h>

#define PAGEFS_IOC_SIZE 16368
#define PAGEFS_IOC_BATCH _IOWR('P', 0x47, char[PAGEFS_IOC_SIZE])
#define PAGEFS_IOC_MAGIC 0x53464750U
#define PAGEFS_IOC_VERSION 1
#define PAGEFS_IOC_EXISTS 1
#define PAGEFS_IOC_LOOKUP 2
#define PAGEFS_IOC_LOOKUP_PIN 3
#define PAGEFS_IOC_UNPIN 4
#define PAGEFS_IOC_RESERVE 5
#define PAGEFS_IOC_COMMIT 6
#define PAGEFS_IOC_ABORT UINT64_MAX /* COMMIT's length: give the slot back */
#define PAGEFS_IOC_HAS_CHECKSUM 1U  /* record flag: checksum is the page's XXH3-64 */
#define PAGEFS_IOC_PINNED 2U        /* record flag: the slot is pinned until UNPIN */
/* Names that always fit one LOOKUP_PIN (a data file path of up to 4 KiB). */
#define PAGEFS_IOC_MAX_NAMES 306

struct pagefs_ioc_hdr {
	uint32_t magic;
	uint16_t version;
	uint16_t op;
	uint32_t count;
	uint32_t bytes;
};

#define PAGEFS_IOC_PLACE_WHERE 1
#define PAGEFS_IOC_PLACE_DONE 2

struct pagefs_ioc_place {
	uint32_t magic; /* PAGEFS_IOC_MAGIC */
	uint16_t version;
	uint16_t op;        /* PAGEFS_IOC_PLACE_WHERE or _DONE */
	uint64_t offset;    /* WHERE's reply: the slot's offset in the data file */
	uint64_t slot_size; /* WHERE's reply */
	uint64_t length;    /* DONE: the page's length */
	uint64_t checksum;  /* DONE: XXH3-64 of its bytes */
	uint64_t pool_ino;  /* WHERE's reply: the pool directory's inode number */
};

#define PAGEFS_IOC_PLACE _IOWR('P', 0x48, struct pagefs_ioc_place)

struct pagefs_ioc_rec {
	int32_t err; /* 0, -ENOENT, -EINVAL for a bad name */
	uint32_t flags;
	uint64_t ino;    /* the page version's inode number */
	uint64_t offset; /* of its bytes in the data file */
	uint64_t length;
	uint64_t checksum;
};

_Static_assert(sizeof(struct pagefs_ioc_hdr) == 16, "header layout");
_Static_assert(sizeof(struct pagefs_ioc_rec) == 40, "record layout");
_Static_assert(sizeof(struct pagefs_ioc_place) == 48, "place layout");
_Static_assert(16 + 16 + PAGEFS_IOC_MAX_NAMES * 40 + 4096 <= PAGEFS_IOC_SIZE, "max names fit");

#endif
