/*
 * fs_commit.c - the commit point and the end of a handle.
 *
 * FUSE flush is sent for every close() and close() waits for its answer,
 * so the writer's close publishes the page: wait for writes still in
 * flight, finish the checksum (the write stream's, or a re-read of the
 * slot), sync the data file first under --durability power, and ask meta
 * to commit. Data is on the backing file before the index names it.
 *
 * Not every close is the writer's (fs_task.h):
 *   - a fork()ed child closes its copy of the descriptor at exec or exit:
 *     a flush from a process that neither opened nor wrote the file is
 *     ignored, so a writer that spawns a program mid-write does not
 *     publish half a page;
 *   - a writer being killed or crashing closes its files from the kernel's
 *     exit path: its reservation is given back and nothing is published.
 * Comparing thread ids settles the common case (the thread that opened or
 * wrote closes) without reading /proc.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs_align.h"
#include "fs/fs_inode.h"
#include "fs/fs_inval.h"
#include "fs/fs_task.h"
#include "meta/log.h"

/* A checksum re-read must not run past the end of the data file where
 * the page ends in a hole: make the last byte exist (it reads as zero
 * anyway, and no one else writes inside our slot). */
static int cover_end(int fd, uint64_t end)
{
	struct stat st;
	int ret;

	if (end == 0 || fstat(fd, &st) < 0 || (uint64_t)st.st_size >= end)
		return 0;
	do
		ret = (int)pwrite(fd, "", 1, (off_t)(end - 1));
	while (ret < 0 && errno == EINTR);
	return ret < 0 ? -errno : 0;
}

/* Publishes reservation r of `length` bytes. 0 or -errno; on an error the
 * reservation is gone either way. */
static int publish(struct fs_mount *fs, struct fs_handle *h, const struct meta_resv *r,
                   uint64_t length, int have_sum, uint64_t sum)
{
	uint64_t base = r->slot * r->slot_size;
	int ret = 0;

	if (!have_sum) {
		ret = cover_end(h->data_fd, base + length);
		if (ret == 0)
			ret = meta_checksum_range(h->data_fd, base, length, &sum);
		if (ret == -ENODATA)
			ret = -EIO; /* the data file lost the slot's end */
	}
	if (ret == 0 && meta_config(fs->meta)->durability == META_DURABLE_POWER &&
	    fdatasync(h->data_fd) < 0)
		ret = -errno;
	if (ret < 0) {
		meta_page_abort(fs->meta, r);
		return ret;
	}
	return meta_page_commit(fs->meta, r, length, sum);
}

int fs_writer_owned(struct fs_handle *h, pid_t tid)
{
	pid_t owner, owner_tgid, writer, tgid;

	pthread_mutex_lock(&h->lock);
	owner = h->w.owner_tid;
	owner_tgid = h->w.owner_tgid;
	writer = h->w.writer_tid;
	pthread_mutex_unlock(&h->lock);
	if (tid <= 0 || tid == owner || tid == writer)
		return 1;
	tgid = fs_task_tgid(tid);
	if (!owner_tgid) {
		owner_tgid = fs_task_tgid(owner);
		pthread_mutex_lock(&h->lock);
		h->w.owner_tgid = owner_tgid;
		pthread_mutex_unlock(&h->lock);
	}
	if (!tgid || !owner_tgid || tgid == owner_tgid)
		return 1;
	return writer && fs_task_tgid(writer) == tgid;
}

int fs_writer_flush(struct fs_mount *fs, struct fs_handle *h, pid_t tid)
{
	struct meta_resv r;
	uint64_t length, placed_len, sum = 0;
	int have_sum, held, killed, ret;

	if (!fs_writer_owned(h, tid))
		return 0;
	pthread_mutex_lock(&h->lock);
	while (h->w.state == FS_W_BUSY || h->w.inflight > 0)
		pthread_cond_wait(&h->idle, &h->lock);
	r = h->w.resv;
	/* Bytes a write held back (fs_write.c): written before the commit,
	 * or dropped with the page. Nothing is in flight to read them. */
	char *bytes = h->w.held;
	uint64_t bytes_pos = r.slot * h->slot_size + h->w.held_off;
	size_t bytes_len = h->w.held_len;
	h->w.held = NULL;
	if (h->w.state != FS_W_OPEN) {
		/* Already published (a dup'd descriptor), or failed: the
		 * write or flush that failed told the caller, so close()
		 * succeeds as on a local filesystem. Give the slot back now. */
		held = h->w.resv_held;
		h->w.resv_held = 0;
		ret = -h->w.report;
		h->w.report = 0;
		pthread_mutex_unlock(&h->lock);
		fs_align_give(bytes);
		if (held)
			meta_page_abort(fs->meta, &r);
		return ret;
	}
	h->w.state = FS_W_BUSY;
	length = h->w.length;
	placed_len = h->w.placed_len;
	have_sum = h->w.placed || (h->w.hash_ok && h->w.hashed == length);
	if (h->w.placed)
		sum = h->w.placed_sum; /* the placed write's (fs_place.c) */
	else if (have_sum)
		sum = XXH3_64bits_digest(h->w.xxh);
	pthread_mutex_unlock(&h->lock);

	killed = fs_task_killed(tid);
	if (killed) {
		log_debug("writer %d of page %s was killed; not committing", (int)tid, h->name);
		fs_align_give(bytes);
		meta_page_abort(fs->meta, &r);
		ret = -EIO; /* what a surviving sharer of the file sees */
	} else if (bytes && (ret = fs_writer_put_held(fs, h, bytes, bytes_pos, bytes_len)) < 0) {
		log_debug("held bytes of page %s: %s", h->name, strerror(-ret));
		meta_page_abort(fs->meta, &r);
	} else {
		ret = publish(fs, h, &r, length, have_sum, sum);
		if (ret < 0)
			log_debug("commit of page %s failed: %s", h->name, strerror(-ret));
	}

	pthread_mutex_lock(&h->lock);
	h->w.state = ret == 0 ? FS_W_COMMITTED : FS_W_FAILED;
	h->w.err = -ret;
	h->w.resv_held = 0;
	pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);

	/* The pool's mtime and ctime moved (a publish is no request on the
	 * directory the kernel would drop them for): dropped before close()
	 * returns, from this thread (flush holds no directory lock). */
	if (ret == 0 && !killed)
		fs_inval_pool(fs->inval, h->pool_id, 1);
	/* Placed bytes count as written once, when published (write()
	 * counts its own as they come). */
	if (ret == 0 && !killed && placed_len)
		meta_count_io(fs->meta, h->pool_id, 0, placed_len);

	/* A page replaced in place has a new inode (a new version, see
	 * fs_inode.h): the kernel's entry for its name and its attributes of
	 * the old inode must go. (A page of the same name that a new page
	 * replaced is reported by meta's drop callback.) */
	if (ret == 0 && r.replace) {
		struct meta_page_info p;

		int got = meta_page_get(fs->meta, r.page_id, &p) == 0;
		uint64_t ticket = 0;

		if (got)
			ticket = fs_inval_entry(fs->inval, fs_ino_pool(p.pool_id), p.name);
		/* The old inode's cached attributes go before close() returns,
		 * so a stat right after it sees the new version. This one is
		 * sent from the request thread: an inode invalidation takes no
		 * directory lock, and flush holds no lock on the inode. The
		 * name's entry follows from the invalidation thread, so until
		 * then the name may still lead to the version this commit
		 * replaced, which need not be the one this handle opened (the
		 * name was looked up again while it was written): both go. */
		fuse_lowlevel_notify_inval_inode(fs->se, h->ino, 0, 0);
		if (got && fs_ino_page(r.page_id, p.version - 1) != h->ino) /* (masked: wraps) */
			fuse_lowlevel_notify_inval_inode(
				fs->se, fs_ino_page(r.page_id, p.version - 1), 0, 0);
		/* A reader of the old version pins that inode's attributes
		 * (fs_inode.c), so a stat through the name shows the new
		 * version only once the name leads to the new inode: close()
		 * waits (bounded) for the entry invalidation to reach the
		 * kernel. */
		if (ticket && fs_inval_wait(fs->inval, ticket, 500) < 0)
			log_debug("entry invalidation of %s still queued at close", p.name);
	}
	return killed ? 0 : ret;
}

void fs_handle_close(struct fs_mount *fs, struct fs_handle *h)
{
	struct meta_resv r;
	int held;

	if (h->kind == FS_READER) {
		meta_slot_unpin(fs->meta, h->pool_id, h->page.slot);
		return;
	}
	/* No request of this handle is running any more (release, unmount),
	 * but an answered write may still be hashing its bytes. */
	pthread_mutex_lock(&h->lock);
	while (h->w.inflight > 0)
		pthread_cond_wait(&h->idle, &h->lock);
	held = h->w.resv_held;
	h->w.resv_held = 0;
	r = h->w.resv;
	if (h->w.state != FS_W_COMMITTED)
		h->w.state = FS_W_FAILED;
	char *bytes = h->w.held; /* held back by a write: dropped with the page */
	h->w.held = NULL;
	pthread_mutex_unlock(&h->lock);
	fs_align_give(bytes);
	if (held)
		meta_page_abort(fs->meta, &r);
}

void pagefs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_handle *h = fs_handle_of(fi);
	int ret = 0;

	(void)ino;
	if (h && h->kind == FS_WRITER)
		ret = fs_writer_flush(fs_of(req), h, fuse_req_ctx(req)->pid);
	fuse_reply_err(req, -ret);
}
