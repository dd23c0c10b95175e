/*
 * fs_inval.h - kernel cache invalidations, sent from a thread of their own.
 *
 * fuse_lowlevel_notify_inval_* takes the kernel's lock on the directory;
 * a request handler that sends one while the kernel holds that lock for
 * the very request deadlocks. So handlers and meta's drop callback only
 * queue invalidations here and one thread sends them.
 */
#ifndef PAGEFS_FS_INVAL_H
#define PAGEFS_FS_INVAL_H

#include <stdint.h>

struct fuse_session;
struct fs_inval;

/* A queue with no thread yet; invalidations queue up until start. 0 or
 * -ENOMEM. */
int fs_inval_new(struct fs_inval **out);
/*
 * Starts the sending thread for a mounted session. mountpoint is the
 * canonical path the session was mounted on (used to find the kernel
 * connection if the thread must be unstuck at stop). 0 or -errno.
 */
int fs_inval_start(struct fs_inval *iv, struct fuse_session *se, const char *mountpoint);
/* Queues dropping the kernel's dentry `name` in directory `parent`.
 * Returns a ticket for fs_inval_wait (0 if nothing was queued). */
uint64_t fs_inval_entry(struct fs_inval *iv, uint64_t parent, const char *name);
/*
 * Waits at most timeout_ms until the invalidation with ticket seq (and all
 * before it) reached the kernel. A request handler may wait here: it sends
 * nothing itself, so it cannot deadlock on a directory lock, and the bound
 * keeps it from waiting long behind one that is blocked. 0 or -ETIMEDOUT.
 */
int fs_inval_wait(struct fs_inval *iv, uint64_t seq, int timeout_ms);
/* Queues dropping the kernel's attributes and cached data of `ino`. */
void fs_inval_inode(struct fs_inval *iv, uint64_t ino);
/* Discards what is queued, stops and joins the thread. Call before the
 * session is unmounted and destroyed. Returns 0, or -EBUSY if the thread
 * could not be stopped: then it still uses the session and this queue, so
 * both must be leaked, not destroyed. */
int fs_inval_stop(struct fs_inval *iv);
/* Frees the queue (after stop, or if never started). */
void fs_inval_free(struct fs_inval *iv);

/*
 * Pool directory attributes (their mtime and ctime move with every
 * publish, rename, unlink and eviction; the kernel caches them for the
 * attr timeout). fs_inval_pool_served: a reply is about to give the
 * kernel pool_id's attributes (call before reading them). fs_inval_pool:
 * pool_id's times moved; if a reply gave its attributes since the last
 * call, they are dropped: from this thread when now (a request handler
 * holding no lock on the directory: an inode invalidation takes none),
 * else from the invalidation thread. Changes made through the kernel
 * (create, unlink, rename) need none: the kernel drops them itself.
 */
void fs_inval_pool_served(struct fs_inval *iv, uint32_t pool_id);
void fs_inval_pool(struct fs_inval *iv, uint32_t pool_id, int now);

/* A meta_drop_cb (arg: the struct fs_inval): the engine dropped a page by
 * itself, so the kernel must forget its name (and the pool's times). */
void fs_inval_on_drop(void *arg, uint32_t pool_id, uint64_t page_id, const char *name);

/* A meta_dir_cb (arg: the struct fs_inval): another node removed a rank
 * (ns NULL) or a pool directory; the kernel's entry for it must go. */
void fs_inval_on_dir(void *arg, int rank, const char *ns);

#endif
