/*
 * fs_handle.h - open page files and the table that keeps them.
 *
 * A reader handle pins one committed slot for its lifetime; its fields are
 * fixed at open. A writer handle owns a reservation (struct meta_resv)
 * from create, or from open(O_TRUNC) of a committed page, until its first
 * flush commits it (fs_commit.c) or release gives it back.
 *
 * The table lists every open handle (so unmount can unpin and abort them)
 * and indexes them by page id: getattr and setattr of a page still being
 * written use its writer's length, and getattr of an older version of a
 * page (fs_inode.h) the attributes a reader of it pinned.
 */
#ifndef PAGEFS_FS_HANDLE_H
#define PAGEFS_FS_HANDLE_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <xxhash.h>

#include "meta/meta.h"

struct fs_mount;

enum fs_handle_kind { FS_READER, FS_WRITER };

enum fs_writer_state {
	FS_W_OPEN,      /* reservation held; writes land in resv.slot */
	FS_W_BUSY,      /* one thread commits or re-reserves; the rest wait on idle */
	FS_W_COMMITTED, /* published; a later write starts a replacement */
	FS_W_FAILED,    /* nothing will be published; err is why */
};

/* A reader keeps the bytes its open checked for pages up to this size,
 * while the mount keeps at most FS_KEEP_TOTAL bytes in all. */
#define FS_KEEP_MAX (1ULL << 20)
#define FS_KEEP_TOTAL (256ULL << 20)

/* Bytes a reader keeps. A read answered from them holds a reference
 * while it replies: once the reply is sent, the kernel may release the
 * handle at once, so nothing of the handle is touched after it. */
struct fs_kept {
	_Atomic unsigned refs;
	uint64_t len;
	_Alignas(4096) char data[]; /* one backing request a page (fs_align.h) */
};

/* Writer state; every field is protected by fs_handle.lock. */
struct fs_writer {
	enum fs_writer_state state;
	int err;       /* FS_W_FAILED: positive errno later writes get */
	int report;    /* positive errno the next flush returns, or 0 */
	int resv_held; /* resv must still be committed or aborted */
	struct meta_resv resv;
	uint64_t length;     /* max end written, or what ftruncate set */
	uint64_t append_end; /* O_APPEND: end of the appends claimed so far */
	uint64_t safe_end;   /* [0, safe_end) holds our bytes or zeros */
	unsigned inflight;   /* writes between claim and completion (hash included) */
	uint64_t hashed;     /* xxh covers [0, hashed) when hash_ok */
	uint64_t hash_next;  /* answered writes will make it [0, hash_next) */
	int hash_ok;
	XXH3_state_t *xxh;
	pid_t owner_tid;  /* the thread that opened the file */
	pid_t owner_tgid; /* its process, once looked up (0: not yet) */
	pid_t writer_tid; /* the last other thread that wrote (0: none) */
	/* A FUSE backing: bytes [held_off, held_off + held_len) of the slot,
	 * of a write the kernel cut at its request size, kept back so that
	 * the rest of it goes to the data file in the same request
	 * (fs_write.c); an fs_align.h buffer h owns, or NULL. */
	char *held;
	uint64_t held_off;
	size_t held_len;
	int pushing; /* a write is putting held bytes into the data file */
	/* A placed write (fs_place.c): the writer put [0, length) into the
	 * slot itself and gave their checksum, which the commit takes. Any
	 * write() or truncate through the handle clears it. */
	int placed;
	uint64_t placed_sum;
	uint64_t placed_len; /* the last DONE's length: counted written at commit */
};

struct fs_handle {
	/* Fixed at open. */
	enum fs_handle_kind kind;
	uint64_t ino;
	uint32_t pool_id;
	uint64_t page_id;
	int data_fd; /* the pool's data file, owned by meta */
	uint64_t slot_size;
	/* Writer: the name it was opened by, or that its process renamed it
	 * to since (set while the writer is FS_W_BUSY; for messages). */
	char name[META_NAME_MAX + 1];

	/* Reader only, fixed at open: the page as pinned (its slot, length
	 * and attributes). */
	struct meta_page_info page;
	int cached; /* reads go through the kernel's page cache (no direct I/O) */
	/* The page's bytes as the open's checksum check read them (pages up
	 * to FS_KEEP_MAX), so that the first read does not read them again;
	 * dropped by the read that reaches their end, or at release. keeps
	 * is fixed at open; kept is protected by lock. */
	int keeps;
	struct fs_kept *kept;

	/* Writer (and a reader's kept bytes). */
	pthread_mutex_t lock; /* a leaf; never held across meta_* calls */
	/* Kernel file handles (fi->fh) on h, each holding a reference: 1,
	 * more where the writer's process opened its page again (fs_file.c);
	 * the last release ends h. Protected by lock. */
	int opens;
	pthread_cond_t idle; /* signalled when state leaves BUSY or inflight hits 0 */
	struct fs_writer w;  /* protected by lock */

	/* Protected by fs_handles.lock. */
	struct fs_handle *prev, *next; /* list of all handles */
	struct fs_handle *hash_next;   /* by_page bucket chain */
	int linked;
	int refs;
};

#define FS_HANDLE_BUCKETS 1024

/* Pages whose writer the kernel is about to retry (fs_handles_expect_writer). */
#define FS_EXPECT_MAX 64
#define FS_EXPECT_NS 1000000000ULL /* how long a writer is expected */

struct fs_expect {
	uint64_t page_id;
	uint64_t until_ns; /* CLOCK_MONOTONIC; 0: a free entry */
};

struct fs_handles {
	pthread_mutex_t lock;        /* a leaf: never held with a handle lock or across meta_* */
	_Atomic uint64_t kept;       /* bytes readers keep (FS_KEEP_TOTAL at most) */
	_Atomic uint64_t kept_reads; /* reads answered from kept bytes */
	struct fs_handle *all;       /* every open handle */
	struct fs_handle *by_page[FS_HANDLE_BUCKETS]; /* handles by page_id */
	struct fs_expect expect[FS_EXPECT_MAX];       /* writers on their way */
	int nexpect;                                  /* entries in use */
};

/* fs_handle.c */

/* A buffer of len bytes (one reference) for a reader to keep its page
 * in, or NULL when the page is over FS_KEEP_MAX or the mount keeps
 * FS_KEEP_TOTAL already (or on ENOMEM). fs_keep_put drops a reference
 * (NULL: nothing). */
struct fs_kept *fs_keep_alloc(struct fs_handles *t, uint64_t len);
void fs_keep_put(struct fs_handles *t, struct fs_kept *k);

/* 0 or -errno. */
int fs_handles_init(struct fs_handles *t);
/* Frees the table; every handle must have been removed. */
void fs_handles_destroy(struct fs_handles *t);

/* A new handle with one reference (the caller's, later fi->fh's). A writer
 * gets its lock, condition and hash state. NULL on ENOMEM. */
struct fs_handle *fs_handle_new(enum fs_handle_kind kind);
/* Lists h and indexes it by page_id. */
void fs_handles_add(struct fs_handles *t, struct fs_handle *h);
/*
 * Lists h unless a writer and a cached reader would share an inode, which
 * the kernel's page cache cannot survive (fs_file.c): a reader is listed
 * uncached (h->cached = 0) while a writer of its page is listed; a writer
 * is not listed (-EBUSY) while a cached reader of its page is listed
 * through its inode h->ino. 0 or -EBUSY; one decision under the table lock.
 */
int fs_handles_add_checked(struct fs_handles *t, struct fs_handle *h);
/*
 * A writer of page_id is on its way: its open(O_TRUNC) met a cached
 * reader, the page moved to a new inode and the kernel will retry the
 * open there (fs_file.c, open_replace). Until that writer is listed, or
 * FS_EXPECT_NS pass, readers of the page are listed uncached, so that
 * one opened in between through the new inode does not turn the retry
 * away as well (it did, for 4 rewrites in 10 under two busy readers).
 */
void fs_handles_expect_writer(struct fs_handles *t, uint64_t page_id);
/* The release of one kernel file handle on h: the last one unlists h
 * and ends its hold on the index (fs_handle_close); drops that file
 * handle's reference. */
void fs_handle_release(struct fs_mount *fs, struct fs_handle *h);
/* Unlists h; the caller still owns its reference. No-op if not listed. */
void fs_handles_remove(struct fs_handles *t, struct fs_handle *h);
/* Unlists and returns any listed handle, with the table's view of it
 * gone; NULL when empty. For unmount. */
struct fs_handle *fs_handles_pop(struct fs_handles *t);
/* Drops one reference; the last one frees h. */
void fs_handles_put(struct fs_handles *t, struct fs_handle *h);
/* A listed writer of page_id with a new reference (put it), or NULL. */
struct fs_handle *fs_handles_find_writer(struct fs_handles *t, uint64_t page_id);
/* A listed reader of page_id opened through inode ino, with a new
 * reference (put it), or NULL. */
struct fs_handle *fs_handles_find_reader(struct fs_handles *t, uint64_t page_id, uint64_t ino);

/* fs_name.c */

/* Writer handles (new references: put them) of the pages of (pool_id,
 * name) that thread tid is still writing (it opened them, or was the last
 * other thread to write through them), at most max into out; returns how
 * many. Only that thread: other threads of its process writing the same
 * name each make a page of their own (the last close wins, every page
 * whole), and none reads another's bytes before its commit. */
#define FS_OWN_MAX 8
/* 1 if thread tid opened writer h or was the last other thread to write
 * through it: the thread whose unlink, rename, lookup and second open
 * reach the page h is still writing. */
int fs_writer_thread(struct fs_handle *h, pid_t tid);
int fs_writers_owned(struct fs_mount *fs, uint32_t pool_id, const char *name, pid_t tid,
                     struct fs_handle **out, int max);

/* fs_write.c */

/* Writes size bytes at *off through writer h for thread tid (append, the
 * write's O_APPEND: at the writer's own end, which *off is set to). Returns size or -errno; a
 * backing error or EFBIG fails the handle so nothing is published. On
 * success the caller answers the request and then must call
 * fs_writer_hash with the same bytes, *off and *hash (the commit waits
 * for it). */
ssize_t fs_writer_write(struct fs_mount *fs, struct fs_handle *h, const char *buf, size_t size,
                        uint64_t *off, int append, pid_t tid, int *hash);
/* Ends a successful write: feeds its bytes to the checksum stream, in
 * order, if fs_writer_write set hash. */
void fs_writer_hash(struct fs_handle *h, const char *buf, size_t size, uint64_t off, int hash);
/* Sets the writer's length (ftruncate). 0 or -errno (-EFBIG past the slot). */
int fs_writer_truncate(struct fs_mount *fs, struct fs_handle *h, uint64_t size);
/* The length and whether h is unpublished (1) or published (0). */
void fs_writer_peek(struct fs_handle *h, uint64_t *length, int *pending);
/* Puts bytes writer h holds back into the data file (before an fsync, a
 * read through h). 0 or -errno (h failed). */
int fs_writer_push(struct fs_mount *fs, struct fs_handle *h);
/* Writes len bytes from held, which writer h held back, at pos in its
 * data file, and gives held back (fs_align_give). Called with h->lock
 * held or not, by whoever took held from h. 0 or -errno. */
int fs_writer_put_held(struct fs_mount *fs, struct fs_handle *h, char *held, uint64_t pos,
                       size_t len);

/* fs_commit.c */

/* 1 if thread tid's process opened writer h or last wrote through it, or
 * that cannot be told (tid 0: outside the daemon's pid namespace); then
 * a close by tid publishes h. */
int fs_writer_owned(struct fs_handle *h, pid_t tid);

/*
 * The commit point, for a close() by thread tid: publishes writer h if tid
 * belongs to the process that opened it or last wrote to it; gives the
 * reservation back if tid is being killed; does nothing for anyone else
 * (a fork()ed child closing its copy). Later calls, and calls after a
 * failed write, return 0. 0 or -errno.
 */
int fs_writer_flush(struct fs_mount *fs, struct fs_handle *h, pid_t tid);

/* fs_place.c: a placed write's ioctl (pagefs_ioctl.h) on writer h: in
 * holds the request, out receives the reply. 0 or -errno. */
int fs_writer_place(struct fs_mount *fs, struct fs_handle *h, const void *in, void *out);
/* Ends h's hold on the index: unpins a reader's slot, aborts a writer's
 * unpublished reservation. Does not unlist or free h. */
void fs_handle_close(struct fs_mount *fs, struct fs_handle *h);

/*
 * The kernel sends a file's RELEASE only after every other request of it
 * was answered (a request already read by the daemon is waited for even
 * when its caller is killed), so a handler may use its handle until it
 * answers, and release may free it. ThreadSanitizer cannot see that order:
 * it passes through /dev/fuse. In a ThreadSanitizer build a handler that
 * touches a handle without its lock announces its answer
 * (FS_ANSWERED) and release takes that up (FS_RELEASING); otherwise
 * both are nothing.
 */
#if defined(__SANITIZE_THREAD__)
#define FS_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define FS_TSAN 1
#endif
#endif
#ifdef FS_TSAN
#include <sanitizer/tsan_interface.h>
#define FS_ANSWERED(h) __tsan_release(h)
#define FS_RELEASING(h) __tsan_acquire(h)
#else
#define FS_ANSWERED(h) ((void)(h))
#define FS_RELEASING(h) ((void)(h))
#endif

#endif
