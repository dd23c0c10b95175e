/*
 * fs_place.c - placed writes: a writer that puts its page's bytes into the
 * data file itself (pagefs_ioctl.h, PAGEFS_IOC_PLACE).
 *
 * On a FUSE backing a page written through the mount crosses FUSE twice:
 * into this daemon, then into the backing. A placed write crosses once,
 * as a plain directory's file does: the writer asks where its slot is
 * (WHERE), writes the data file there, and gives the length and the
 * checksum of what it wrote (DONE). Everything else stays as for a write
 * through the mount: the slot is the handle's reservation from open to
 * close, no one reads it before the commit, and close() publishes the
 * page at once or not at all (fs_commit.c takes the given checksum
 * instead of reading the slot back). A writer whose bytes do not match its
 * checksum has its page read as a miss.
 *
 * The slot is this node's only while its lease is: both requests check it
 * (meta_lease_hold), and so does the commit. Between WHERE and the
 * writer's last byte a node that lost its lease can still write the slot,
 * the window a write through the mount has between its check and its
 * system call (docs/DESIGN.md, "Placed writes"), longer by the writer's
 * own write; the checksum turns foreign bytes into a miss.
 */
#include <errno.h>
#include <string.h>

#include "fs/fs_inode.h"
#include "fs/fs_priv.h"
#include "fs/pagefs_ioctl.h"

/* WHERE: the slot of h's reservation. Called with h->lock held. */
static int where(struct fs_handle *h, struct pagefs_ioc_place *out)
{
	if (h->w.state != FS_W_OPEN || !h->w.resv_held)
		return -EINVAL;
	out->offset = h->w.resv.slot * h->slot_size;
	out->slot_size = h->slot_size;
	out->pool_ino = fs_ino_pool(h->pool_id);
	return 0;
}

/* DONE: the writer's bytes are [0, length) of the slot, summed to
 * checksum. Called with h->lock held. */
static int done(struct fs_handle *h, const struct pagefs_ioc_place *in)
{
	if (h->w.state != FS_W_OPEN || !h->w.resv_held)
		return -EINVAL;
	if ((h->w.length > 0 || h->w.held) && !h->w.placed)
		return -EINVAL; /* bytes came through the mount: a page is written one way */
	if (in->length > h->slot_size)
		return -EFBIG;
	h->w.length = in->length;
	h->w.safe_end = in->length; /* beyond it: zeroed before any write lands there */
	h->w.append_end = 0;
	h->w.hash_ok = 0; /* the write stream holds none of these bytes */
	h->w.placed = 1;
	h->w.placed_sum = in->checksum;
	h->w.placed_len = in->length;
	return 0;
}

int fs_writer_place(struct fs_mount *fs, struct fs_handle *h, const void *in, void *out)
{
	struct pagefs_ioc_place req, rep;
	int ret;

	memcpy(&req, in, sizeof(req));
	if (req.magic != PAGEFS_IOC_MAGIC || req.version != PAGEFS_IOC_VERSION ||
	    (req.op != PAGEFS_IOC_PLACE_WHERE && req.op != PAGEFS_IOC_PLACE_DONE))
		return -EINVAL;
	if (!h || h->kind != FS_WRITER)
		return -EBADF;
	ret = meta_lease_hold(fs->meta); /* the slot is ours only while the lease is */
	if (ret < 0)
		return ret;
	rep = req;
	pthread_mutex_lock(&h->lock);
	/* A commit, or a write() still hashing its bytes, finishes first. */
	while (h->w.state == FS_W_BUSY || h->w.inflight > 0 || h->w.pushing)
		pthread_cond_wait(&h->idle, &h->lock);
	ret = req.op == PAGEFS_IOC_PLACE_WHERE ? where(h, &rep) : done(h, &req);
	pthread_mutex_unlock(&h->lock);
	if (ret == 0)
		memcpy(out, &rep, sizeof(rep));
	return ret;
}
