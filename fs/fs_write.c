/*
 * fs_write.c - the write side of a writer handle: pwrite into the reserved
 * slot, the streaming checksum, holes, ftruncate, and writes after a
 * commit.
 *
 * A write claims its range under the handle lock, writes the bytes with
 * the lock dropped (concurrent writes of one handle proceed in parallel)
 * and takes the lock again to record the result. `inflight` counts the
 * writes in between so the commit can wait for them.
 *
 * Checksum: while writes arrive in order (each starts where the hashed
 * prefix ends) they feed an XXH3 stream, so the commit need not read the
 * page back. Any other write, or a truncate away from the hashed end,
 * drops the stream and the commit re-reads the range instead. A write is
 * answered once its bytes are in the data file and hashed after that,
 * from the request's buffer (libfuse reuses it only when the handler
 * returns): the kernel sends the next piece of a large write() while this
 * one is hashed, instead of waiting for the hash too. Order is decided
 * before the answer: a write that starts at `hash_next` takes its place
 * in the stream (hash_next moves to its end), then waits until the
 * stream reaches its start (`hashed`) and adds its bytes. The commit
 * waits for every hash (`inflight` counts a write until it is hashed).
 *
 * Holes: a new slot may still hold an older page's bytes. [0, safe_end)
 * is known to hold only bytes of this writer or zeros. A write starting
 * beyond it, or an ftruncate extending beyond it, first zeroes the rest of
 * the slot (punching a hole; writing zeros where that is unsupported), so
 * a reader never sees another page's bytes. This happens under the handle
 * lock - rarely, and so that no concurrent write of this handle can land
 * in the range while it is being zeroed.
 *
 * Held bytes: on a FUSE backing each request costs a round trip. A 1 MiB
 * write() from a buffer that starts inside a page reaches us as two
 * requests (the kernel sends at most 256 pages of the caller's memory a
 * request): 1 MiB less a few bytes, then those bytes. Written as they
 * come, that is two backing requests, the second under the backing
 * file's lock like the first. So a write the kernel cut at that size
 * (starting on a page of the slot, ending inside one) is kept back in its
 * thread's aligned buffer, which the handle takes over (fs_align_take,
 * no copy); the next write, when it continues it, is appended and both
 * go to the data file in one request. Anything else pushes the held
 * bytes first: another write, the commit, a truncate, an fsync, a read
 * through the handle. The held write is answered before its bytes are in
 * the data file, so a backing error reaches the write that pushes them or
 * close(), and nothing is published. Held bytes are taken over only once
 * no write of the handle is in flight, so none is still hashing them.
 *
 * Writes after a commit: close() of any descriptor commits (FUSE flush),
 * so a shell redirection (open, dup2, close, then the program writes)
 * publishes an empty page first. A later write through the same open file
 * then starts an in-place replacement carrying the published bytes over,
 * and the next close commits again - what NFS close-to-open gives too.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_align.h"
#include "fs/fs_inode.h"
#include "fs/fs_recv.h"
#include "meta/hash.h"
#include "meta/log.h"

static const char zeros[65536];

/* Marks h failed with errno err; returns -err. Called with h->lock held. */
static int fail(struct fs_handle *h, int err)
{
	h->w.state = FS_W_FAILED;
	h->w.err = err;
	return -err;
}

/* A write into the data file failed: the operator hears of it too, once
 * in 10 s (on a full disk every write fails). */
static void warn_backing(int err)
{
	static _Atomic int64_t last;
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	int64_t now = (int64_t)ts.tv_sec + 1, prev = atomic_load(&last);
	if ((prev && now - prev < 10) || !atomic_compare_exchange_strong(&last, &prev, now))
		return;
	log_warn("cannot write page bytes into a data file: %s (the writer gets the error; "
	         "said once in 10 s)",
	         strerror(err));
}

static void wait_idle(struct fs_handle *h)
{
	while (h->w.state == FS_W_BUSY)
		pthread_cond_wait(&h->idle, &h->lock);
}

static int pwrite_all(int fd, const char *buf, size_t len, uint64_t pos)
{
	while (len > 0) {
		ssize_t n = pwrite(fd, buf, len, (off_t)pos);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			return -EIO;
		buf += n;
		len -= (size_t)n;
		pos += (uint64_t)n;
	}
	return 0;
}

/* The buffer a page's bytes go to the data file from: on a FUSE backing,
 * bytes that would cross one more request boundary than they need are
 * copied to this thread's aligned buffer (fs_align.h); else buf itself.
 * A write read by fs_recv.c is aligned already and is never copied (its
 * bytes may be in that very buffer). */
static const char *backing_buf(const struct fs_mount *fs, const char *buf, size_t len)
{
	char *aligned;

	if (fs->backing_fuse && fs_align_helps(buf, len) && (aligned = fs_align_buf()) != NULL) {
		memcpy(aligned, buf, len);
		return aligned;
	}
	return buf;
}

/* 1 if writer h should keep back a write of size bytes at off (see "Held
 * bytes" above). Called with h->lock held. */
static int may_hold(const struct fs_mount *fs, const struct fs_handle *h, uint64_t off, size_t size)
{
	uint64_t end = off + size;

	return fs->backing_fuse && !h->w.held && size > FS_MAX_WRITE - FS_ALIGN &&
	       size < FS_MAX_WRITE && off % FS_ALIGN == 0 && end % FS_ALIGN != 0 &&
	       end < h->slot_size;
}

int fs_writer_put_held(struct fs_mount *fs, struct fs_handle *h, char *held, uint64_t pos,
                       size_t len)
{
	int ret = meta_lease_hold(fs->meta); /* see fs_writer_write */

	if (ret == 0 && (ret = pwrite_all(h->data_fd, held, len, pos)) < 0)
		warn_backing(-ret);
	fs_align_give(held);
	return ret;
}

/* Waits until h's held bytes may be taken (nothing in flight may read
 * them, no one else is writing them). Called with h->lock held. */
static void wait_held(struct fs_handle *h)
{
	while ((h->w.held && h->w.inflight > 0) || h->w.pushing)
		pthread_cond_wait(&h->idle, &h->lock);
}

/* Puts h's held bytes into the data file, with h->lock held (rare
 * paths). 0 or -errno (h failed). */
static int push_locked(struct fs_mount *fs, struct fs_handle *h)
{
	char *held;
	int ret;

	wait_held(h);
	held = h->w.held;
	if (!held)
		return 0;
	h->w.held = NULL;
	if (h->w.state != FS_W_OPEN) { /* nothing will be published */
		fs_align_give(held);
		return 0;
	}
	ret = fs_writer_put_held(fs, h, held, h->w.resv.slot * h->slot_size + h->w.held_off,
	                         h->w.held_len);
	return ret < 0 ? fail(h, -ret) : 0;
}

int fs_writer_push(struct fs_mount *fs, struct fs_handle *h)
{
	int ret;

	pthread_mutex_lock(&h->lock);
	while (h->w.state == FS_W_BUSY)
		pthread_cond_wait(&h->idle, &h->lock);
	ret = push_locked(fs, h);
	pthread_mutex_unlock(&h->lock);
	return ret;
}

/* Zeroes [start, slot_size) of h's slot. Called with h->lock held. */
static int zero_tail(struct fs_mount *fs, struct fs_handle *h, uint64_t start)
{
	uint64_t pos = h->w.resv.slot * h->slot_size + start;
	uint64_t end = h->w.resv.slot * h->slot_size + h->slot_size;
	struct stat st;
	int held;

	if (start >= h->slot_size)
		return 0;
	if ((held = meta_lease_hold(fs->meta)) < 0) /* see fs_writer_write */
		return held;
	if (fallocate(h->data_fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)pos,
	              (off_t)(end - pos)) == 0)
		return 0;
	/* Past the end of the data file everything reads as zeros already. */
	if (fstat(h->data_fd, &st) < 0)
		return -errno;
	if ((uint64_t)st.st_size < end)
		end = (uint64_t)st.st_size;
	while (pos < end) {
		size_t n = end - pos < sizeof(zeros) ? (size_t)(end - pos) : sizeof(zeros);
		int ret = pwrite_all(h->data_fd, zeros, n, pos);

		if (ret < 0)
			return ret;
		pos += n;
	}
	return 0;
}

/* Copies len bytes within the data file fd (non-overlapping ranges). */
static int copy_range(int fd, uint64_t from, uint64_t to, uint64_t len)
{
	loff_t in = (loff_t)from, out = (loff_t)to;
	char *buf;

	while (len > 0) {
		ssize_t n = copy_file_range(fd, &in, fd, &out, len, 0);

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		len -= (uint64_t)n;
	}
	if (len == 0)
		return 0;
	buf = malloc(1 << 20);
	if (!buf)
		return -ENOMEM;
	while (len > 0) {
		size_t want = len < (1 << 20) ? (size_t)len : (1 << 20);
		ssize_t n = pread(fd, buf, want, in);
		int ret;

		if (n < 0 && errno == EINTR)
			continue;
		ret = n < 0    ? -errno
		      : n == 0 ? -EIO
		               : pwrite_all(fd, buf, (size_t)n, (uint64_t)out);
		if (ret < 0) {
			free(buf);
			return ret;
		}
		in += n;
		out += n;
		len -= (uint64_t)n;
	}
	free(buf);
	return 0;
}

/*
 * Starts a replacement of the page h published, with the published bytes
 * carried over into the new slot. Called with h->lock held and state
 * COMMITTED; returns with it held, state OPEN on success. 0 or -errno
 * (-EPERM if the page is gone: unlinked, evicted or replaced by a rename).
 */
static int reopen(struct fs_mount *fs, struct fs_handle *h)
{
	struct meta_page_info p;
	struct meta_resv r;
	uint64_t sum = 0;
	int verify = 0;
	int ret;

	h->w.state = FS_W_BUSY;
	pthread_mutex_unlock(&h->lock);

	ret = meta_page_pin(fs->meta, h->page_id, &p, &verify);
	if (ret < 0) {
		pthread_mutex_lock(&h->lock);
		h->w.state = FS_W_COMMITTED;
		pthread_cond_broadcast(&h->idle);
		return -EPERM;
	}
	if (verify) {
		ret = meta_checksum_range(h->data_fd, p.slot * h->slot_size, p.length, &sum);
		ret = meta_page_verdict(fs->meta, &p, ret, sum);
	}
	if (ret == 0)
		ret = meta_page_reserve(fs->meta, h->pool_id, p.name, p.id, &r);
	if (ret == 0) {
		ret = meta_lease_hold(fs->meta); /* see fs_writer_write */
		if (ret == 0)
			ret = copy_range(h->data_fd, p.slot * h->slot_size, r.slot * r.slot_size,
			                 p.length);
		if (ret < 0)
			meta_page_abort(fs->meta, &r);
	}
	meta_slot_unpin(fs->meta, p.pool_id, p.slot);

	pthread_mutex_lock(&h->lock);
	if (ret == 0) {
		h->w.resv = r;
		h->w.resv_held = 1;
		h->w.state = FS_W_OPEN;
		h->w.length = p.length;
		h->w.append_end = 0;
		h->w.safe_end = p.length;
		/* The stream may not match what was carried over; restart it
		 * only when nothing was. */
		XXH3_64bits_reset(h->w.xxh);
		h->w.hashed = h->w.hash_next = 0;
		h->w.hash_ok = p.length == 0;
		h->w.placed = 0;
	} else {
		h->w.state = FS_W_COMMITTED;
	}
	pthread_cond_broadcast(&h->idle);
	return ret;
}

/* Makes h writable: waits out a commit, reopens a committed handle.
 * Called and returns with h->lock held. 0 or -errno. */
static int writable(struct fs_mount *fs, struct fs_handle *h)
{
	wait_idle(h);
	if (h->w.state == FS_W_COMMITTED)
		return reopen(fs, h);
	if (h->w.state == FS_W_FAILED)
		return -h->w.err;
	return 0;
}

ssize_t fs_writer_write(struct fs_mount *fs, struct fs_handle *h, const char *buf, size_t size,
                        uint64_t *offp, int append, pid_t tid, int *hash)
{
	uint64_t off = *offp, end = off + size;
	uint64_t pos;
	int ret;

	*hash = 0;
	pthread_mutex_lock(&h->lock);
	wait_held(h);
	if (tid > 0 && tid != h->w.owner_tid)
		h->w.writer_tid = tid; /* its close commits too (fs_commit.c) */
	ret = writable(fs, h);
	if (ret == 0 && append) {
		/* O_APPEND: after what this writer has, not where the kernel
		 * puts the end: after open(O_TRUNC) of a committed page any
		 * stat of the name (other processes see the old page until the
		 * commit) gives the kernel the old length, and appends landed
		 * after it, zeros before them. Claimed once the handle is
		 * writable (a reopen carries the page's current length over). */
		off = h->w.length > h->w.append_end ? h->w.length : h->w.append_end;
		end = off + size;
		*offp = off;
	}
	if (ret == 0 && (end > h->slot_size || end < off)) {
		/* The page does not fit its pool. A large write() the kernel
		 * split returns a short count, not this error, so close()
		 * reports it too: nothing is published. */
		ret = fail(h, EFBIG);
		h->w.report = EFBIG;
	}
	if (ret == 0 && off > h->w.safe_end) {
		ret = zero_tail(fs, h, h->w.safe_end);
		if (ret < 0)
			fail(h, -ret);
		else
			h->w.safe_end = h->slot_size;
	} else if (ret == 0 && end > h->w.safe_end) {
		h->w.safe_end = end;
	}
	if (ret < 0) {
		pthread_mutex_unlock(&h->lock);
		return ret;
	}
	if (append)
		h->w.append_end = end;
	if (size > 0)
		h->w.placed = 0; /* bytes through the mount: the commit sums the slot */
	h->w.inflight++;
	pos = h->w.resv.slot * h->slot_size + off;
	/* Held bytes: ours to write now, with this write's appended when it
	 * continues them; or this write is held. */
	char *held = h->w.held, *hold = NULL;
	uint64_t held_pos = h->w.resv.slot * h->slot_size + h->w.held_off;
	uint64_t held_off = h->w.held_off;
	size_t held_len = h->w.held_len;
	int append_held = 0;

	if (held) {
		h->w.held = NULL;
		h->w.pushing = 1;
		append_held = off == held_off + held_len && held_len + size <= FS_MAX_WRITE;
	} else if (may_hold(fs, h, off, size) && (hold = fs_align_take(buf)) != NULL) {
		h->w.held = hold;
		h->w.held_off = off;
		h->w.held_len = size;
	}
	pthread_mutex_unlock(&h->lock);

	if (held && append_held) {
		memcpy(held + held_len, buf, size);
		ret = fs_writer_put_held(fs, h, held, held_pos, held_len + size);
	} else if (!hold) {
		ret = held ? fs_writer_put_held(fs, h, held, held_pos, held_len) : 0;
		/* The slot is this node's only while its lease is
		 * (meta_lease_hold), so nothing but the system call comes
		 * between the check and it (the copy to an aligned buffer goes
		 * first). */
		const char *out = backing_buf(fs, buf, size);
		if (ret == 0)
			ret = meta_lease_hold(fs->meta);
		if (ret == 0 && (ret = pwrite_all(h->data_fd, out, size, pos)) < 0)
			warn_backing(-ret);
	}
	pthread_mutex_lock(&h->lock);
	if (held) {
		h->w.pushing = 0;
		pthread_cond_broadcast(&h->idle);
	}
	if (ret < 0) {
		fail(h, -ret);
		if (--h->w.inflight == 0)
			pthread_cond_broadcast(&h->idle);
	} else {
		if (end > h->w.length)
			h->w.length = end;
		if (h->w.hash_ok && off == h->w.hash_next && size > 0) {
			h->w.hash_next = end; /* our place in the stream */
			*hash = 1;
		} else if (size > 0) {
			h->w.hash_ok = 0;
		}
	}
	pthread_mutex_unlock(&h->lock);

	if (ret < 0)
		return ret;
	meta_count_io(fs->meta, h->pool_id, 0, size);
	return (ssize_t)size;
}

void fs_writer_hash(struct fs_handle *h, const char *buf, size_t size, uint64_t off, int hash)
{
	pthread_mutex_lock(&h->lock);
	if (hash) {
		/* The writes before ours in the stream may still be hashing. */
		while (h->w.hash_ok && h->w.hashed != off)
			pthread_cond_wait(&h->idle, &h->lock);
		if (h->w.hash_ok) {
			/* Only we touch the stream until hashed moves on. */
			pthread_mutex_unlock(&h->lock);
			meta_hash_update(h->w.xxh, buf, size);
			pthread_mutex_lock(&h->lock);
			h->w.hashed = off + size;
		}
		/* The next write waits for this one, also when a truncate
		 * dropped the stream meanwhile. */
		pthread_cond_broadcast(&h->idle);
	}
	if (--h->w.inflight == 0)
		pthread_cond_broadcast(&h->idle);
	pthread_mutex_unlock(&h->lock);
}

int fs_writer_truncate(struct fs_mount *fs, struct fs_handle *h, uint64_t size)
{
	int ret;

	pthread_mutex_lock(&h->lock);
	ret = writable(fs, h);
	if (ret == 0)
		ret = push_locked(fs, h); /* held bytes go first, then the cut */
	if (ret == 0 && size > h->slot_size)
		ret = -EFBIG;
	if (ret == 0) {
		/* Bytes cut off now must read as zeros if the page grows again. */
		if (size < h->w.length && size < h->w.safe_end)
			h->w.safe_end = size;
		if (size > h->w.safe_end) {
			ret = zero_tail(fs, h, h->w.safe_end);
			if (ret < 0)
				fail(h, -ret);
			else
				h->w.safe_end = h->slot_size;
		}
	}
	if (ret == 0) {
		if (size != h->w.length)
			h->w.placed = 0;
		h->w.length = size;
		if (h->w.append_end > size)
			h->w.append_end = size;
		if (size != h->w.hash_next)
			h->w.hash_ok = 0;
	}
	pthread_mutex_unlock(&h->lock);
	return ret;
}

void fs_writer_peek(struct fs_handle *h, uint64_t *length, int *pending)
{
	pthread_mutex_lock(&h->lock);
	*length = h->w.length;
	*pending = h->w.state != FS_W_COMMITTED;
	pthread_mutex_unlock(&h->lock);
}

void pagefs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi)
{
	struct fs_handle *h = fs_handle_of(fi);
	ssize_t n;
	int hash;

	(void)ino;
	if (h->kind != FS_WRITER)
		return (void)fuse_reply_err(req, EBADF);
	if (off < 0)
		return (void)fuse_reply_err(req, EINVAL);
	buf = fs_recv_payload(buf); /* page-aligned where fs_recv.c could */
	uint64_t at = (uint64_t)off;
	/* (the kernel sends the file's flags with each write: fcntl may
	 * have changed O_APPEND since the open) */
	n = fs_writer_write(fs_of(req), h, buf, size, &at, (fi->flags & O_APPEND) != 0,
	                    fuse_req_ctx(req)->pid, &hash);
	if (n < 0)
		return (void)fuse_reply_err(req, (int)-n);
	fuse_reply_write(req, (size_t)n);
	fs_writer_hash(h, buf, size, at, hash); /* buf is still ours */
}
