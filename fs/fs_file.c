/*
 * fs_file.c - opening, reading and closing page files: create, open, read,
 * release, fsync and setattr.
 *
 * create reserves a slot and returns a writer handle (see fs_write.c and
 * fs_commit.c for the rest of its life). open of a committed page returns
 * a reader handle that pins the page's slot, so unlink, eviction or a
 * replacement never reuses those bytes while the file is open; with
 * O_TRUNC for writing it starts an in-place replacement instead.
 *
 * Reads are spliced straight from the pool's data file to the FUSE device
 * (fuse_reply_data with an fd buffer): the bytes never pass through this
 * process. One exception: an open that checks a page's checksum reads the
 * page anyway, and for pages up to FS_KEEP_MAX keeps those bytes and
 * answers reads from them until one reaches the end (read_kept), instead
 * of reading the data file twice. Writers use direct I/O. Readers, by
 * --kernel-cache:
 *   - never (the default): direct I/O; each read is one max_read request
 *     (512 KiB: what a pipe can splice, see fs_main.c; 1 MiB on a
 *     FUSE backing, whose reads are copied through an aligned buffer,
 *     fs_align.h). Filling the
 *     kernel's page cache instead costs several times more on a cold read
 *     (page allocation per 4 KiB), which a page read once never earns
 *     back;
 *   - reread: direct for a page's first open, the kernel's page cache
 *     from its second open on; always: the cache from the first open.
 *     Repeated reads of a hot page never reach us (only open does), at
 *     the speed of a local file; keep_cache keeps what earlier readers of
 *     the inode cached.
 * A cached inode must only ever hold one version's bytes: an inode
 * (fs_inode.h) names one immutable version, so keep_cache is safe for the
 * current version's inode, and the open of an older version's inode drops
 * its cache. But a writer on the same inode would corrupt a cached
 * reader's view: open(O_TRUNC) and ftruncate reset the kernel's i_size
 * and extending writes grow it, cutting short or stretching page-cache
 * reads. So the two never share an inode (fs_handles_add_checked): a
 * reader opened while a writer of the page is open reads direct, and an
 * open(O_TRUNC) through an inode with a cached reader first moves the
 * page to a new version (a new inode) and answers ESTALE, so the kernel
 * looks the name up again and retries the open on the new inode; readers
 * opened until that retry arrives read direct (fs_handles_expect_writer),
 * or the kernel's one retry could meet a new cached reader too.
 * Readers open with noflush: their flush would do nothing, and each
 * close() would wait for it. Direct readers cannot mmap() MAP_SHARED
 * (ENODEV; MAP_PRIVATE reads through the page cache); cached ones can.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fs_align.h"
#include "fs/fs_inode.h"
#include "fs/fs_inval.h"
#include "meta/log.h"

/* Hands h to the kernel. If the request was interrupted the kernel will
 * never release it, so undo it here. */
static void reply_open(fuse_req_t req, struct fs_mount *fs, struct fs_handle *h,
                       struct fuse_file_info *fi, const struct fuse_entry_param *e)
{
	int ret;

	fi->fh = (uintptr_t)h;
	ret = e ? fuse_reply_create(req, e, fi) : fuse_reply_open(req, fi);
	if (ret < 0)
		fs_handle_release(fs, h);
}

void fs_handle_release(struct fs_mount *fs, struct fs_handle *h)
{
	pthread_mutex_lock(&h->lock);
	int last = --h->opens == 0;
	pthread_mutex_unlock(&h->lock);
	if (last) {
		fs_handles_remove(&fs->handles, h);
		fs_handle_close(fs, h);
	}
	fs_handles_put(&fs->handles, h);
}

/* An open of a page the caller's process is still writing: another file
 * handle on its writer (as a second descriptor of one file, on a local
 * filesystem), emptied first with O_TRUNC. stress-ng --open creates a
 * file, opens it again with O_TRUNC and unlinks it only if that open
 * succeeds. A plain read-only open is ENOENT, as for anyone else: readers
 * never see a page before its commit (another thread of the writer's
 * process reading the name must not get half of it). */
static void open_own(fuse_req_t req, struct fs_mount *fs, uint64_t page_id,
                     struct fuse_file_info *fi)
{
	int reader = (fi->flags & O_ACCMODE) == O_RDONLY && !(fi->flags & O_TRUNC);
	struct fs_handle *h = reader ? NULL : fs_handles_find_writer(&fs->handles, page_id);
	int ret = -ENOENT;

	if (h && fs_writer_thread(h, fuse_req_ctx(req)->pid)) {
		pthread_mutex_lock(&h->lock);
		if (h->opens > 0) { /* (0: its last release is under way) */
			h->opens++;
			ret = 0;
		}
		pthread_mutex_unlock(&h->lock);
	}
	if (ret == 0 && (fi->flags & O_TRUNC) && (ret = fs_writer_truncate(fs, h, 0)) < 0)
		fs_handle_release(fs, h);
	else if (ret < 0 && h)
		fs_handles_put(&fs->handles, h);
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fi->direct_io = 1;
	reply_open(req, fs, h, fi, NULL);
}

/* A writer handle for reservation r opened through inode ino, listed
 * (checked: see fs_handles_add_checked) into *out. 0, -ENOMEM or -EBUSY
 * (r aborted). */
static int new_writer(fuse_req_t req, struct fs_mount *fs, fuse_ino_t ino,
                      const struct meta_resv *r, const struct meta_pool_info *pool,
                      const char *name, int checked, struct fs_handle **out)
{
	struct fs_handle *h = fs_handle_new(FS_WRITER);

	if (!h) {
		meta_page_abort(fs->meta, r);
		return -ENOMEM;
	}
	h->ino = ino;
	h->pool_id = r->pool_id;
	h->page_id = r->page_id;
	h->data_fd = pool->data_fd;
	h->slot_size = r->slot_size;
	snprintf(h->name, sizeof(h->name), "%s", name);
	h->w.resv = *r;
	h->w.resv_held = 1;
	h->w.owner_tid = fuse_req_ctx(req)->pid;
	if (!checked) {
		fs_handles_add(&fs->handles, h);
	} else if (fs_handles_add_checked(&fs->handles, h) < 0) {
		fs_handle_close(fs, h); /* aborts r */
		fs_handles_put(&fs->handles, h);
		return -EBUSY;
	}
	*out = h;
	return 0;
}

void pagefs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);
	struct meta_pool_info pool;
	struct meta_page_info p;
	struct fuse_entry_param e;
	struct meta_resv r;
	struct fs_handle *h;
	uint64_t id;
	int ret;

	(void)mode;
	switch (fs_ino_kind(parent, &id)) {
	case FS_POOL:
		break;
	case FS_ROOT:
	case FS_RANK:
		return (void)fuse_reply_err(req, EPERM);
	case FS_PAGE:
		return (void)fuse_reply_err(req, ENOTDIR);
	default:
		return (void)fuse_reply_err(req, ENOENT);
	}
	ret = meta_check_name(name);
	if (ret == 0)
		ret = meta_pool_get(fs->meta, (uint32_t)id, &pool);
	/* O_EXCL: the kernel knows only committed names; a writer creating
	 * the name (uncommitted, ENOENT to lookups) excludes too. */
	if (ret == 0)
		ret = fi->flags & O_EXCL ? meta_page_reserve_excl(fs->meta, (uint32_t)id, name, &r)
		                         : meta_page_reserve(fs->meta, (uint32_t)id, name, 0, &r);
	if (ret != 0)
		return (void)fuse_reply_err(req, -ret);
	if (new_writer(req, fs, fs_ino_page(r.page_id, 0), &r, &pool, name, 0, &h) < 0)
		return (void)fuse_reply_err(req, ENOMEM);

	/* Uncommitted: no caching, so other processes keep asking (and
	 * getting ENOENT) until the commit. */
	memset(&p, 0, sizeof(p));
	if (meta_page_get(fs->meta, r.page_id, &p) < 0) {
		p.id = r.page_id;
		p.pool_id = r.pool_id;
	}
	memset(&e, 0, sizeof(e));
	e.ino = h->ino;
	e.generation = p.gen;
	fs_attr_page(fs, &p, 1, 0, &e.attr);
	fi->direct_io = 1;
	reply_open(req, fs, h, fi, &e);
}

/* open(O_TRUNC) for writing of committed page p: a replacement in a new
 * slot, published in place at commit. Through an older version's inode
 * too: what it replaces is the page's current version either way. If a
 * cached reader has inode ino open, the page moves to a new inode first
 * (see the header) and the kernel retries there. */
static void open_replace(fuse_req_t req, struct fs_mount *fs, fuse_ino_t ino,
                         const struct meta_page_info *p, struct fuse_file_info *fi)
{
	struct meta_page_info moved;
	struct meta_pool_info pool;
	struct meta_resv r;
	struct fs_handle *h = NULL;
	int ret = meta_pool_get(fs->meta, p->pool_id, &pool);

	if (ret == 0)
		ret = meta_page_reserve(fs->meta, p->pool_id, p->name, p->id, &r);
	if (ret == -ENOENT)
		ret = -ESTALE; /* evicted or unlinked since the lookup: see pagefs_op_open */
	if (ret == 0)
		ret = new_writer(req, fs, ino, &r, &pool, p->name, 1, &h);
	if (ret == -EBUSY) {
		/* A cached reader holds ino: retry on a new one (gone: a miss). */
		fs_handles_expect_writer(&fs->handles, p->id); /* before readers see the move */
		if (meta_page_new_version(fs->meta, p->id, &moved) == 0)
			fs_inval_entry(fs->inval, fs_ino_pool(moved.pool_id), moved.name);
		ret = -ESTALE;
	}
	if (ret != 0)
		return (void)fuse_reply_err(req, -ret);
	fi->direct_io = 1;
	reply_open(req, fs, h, fi, NULL);
}

/* Checks a freshly pinned page against its checksum: 0, -EIO when its
 * bytes do not match or are gone (it is dropped: meta_page_verified), or
 * the backing's -errno when they could not be read (the page stays, not
 * yet verified: the next open tries again). A page small enough is read
 * in one piece into *kept (fs_keep_alloc), which the reader serves its
 * first read from; else *kept is NULL. */
static int verify_page(struct fs_mount *fs, const struct meta_page_info *p,
                       const struct meta_pool_info *pool, struct fs_kept **kept)
{
	uint64_t sum = 0, off = p->slot * pool->slot_size;
	int ret;

	*kept = fs_keep_alloc(&fs->handles, p->length);
	if (*kept)
		ret = meta_checksum_read(pool->data_fd, off, p->length, (*kept)->data, &sum);
	else
		ret = meta_checksum_range(pool->data_fd, off, p->length, &sum);
	if (ret < 0 && ret != -ENODATA)
		log_error("cannot read page %s of pool %u/%s to verify it: %s", p->name, pool->rank,
		          pool->ns, strerror(-ret));
	if (ret == 0 && !p->has_checksum)
		meta_page_set_checksum(fs->meta, p->id, p->slot, sum); /* key protocol page */
	ret = meta_page_verdict(fs->meta, p, ret, sum);
	if (ret != 0) {
		fs_keep_put(&fs->handles, *kept);
		*kept = NULL;
	}
	return ret;
}

/*
 * Reading through the inode of an older version of p (fs_inode.h), which
 * the kernel reaches through a name it still caches: 0 if the reader may
 * get the current version through it, -ESTALE if not.
 *
 * One inode's attributes can describe only one version. If a reader of
 * the older version still has it open, ESTALE makes the kernel look the
 * name up again (the current version's inode) and retry. If not, the
 * kernel's cached attributes of the old version are dropped before the
 * open returns, so the next fstat asks us. That one notification is sent
 * from the request thread: unlike an entry invalidation it takes no
 * directory lock, and an O_RDONLY open holds no lock on the inode.
 */
static int stale_open(struct fs_mount *fs, fuse_ino_t ino, const struct meta_page_info *p)
{
	struct fs_handle *h;

	if (fs_ino_current(ino, p))
		return 0;
	h = fs_handles_find_reader(&fs->handles, p->id, ino);
	if (h) {
		fs_handles_put(&fs->handles, h);
		return -ESTALE;
	}
	fuse_lowlevel_notify_inval_inode(fs->se, ino, 0, 0);
	return 0;
}

static void open_read(fuse_req_t req, struct fs_mount *fs, fuse_ino_t ino, uint64_t page_id,
                      struct fuse_file_info *fi)
{
	struct meta_pool_info pool;
	struct meta_page_info p;
	struct fs_handle *h;
	struct fs_kept *kept = NULL;
	int verify = 0;
	int ret = meta_page_pin(fs->meta, page_id, &p, &verify);

	if (ret == -ENOENT && meta_page_get(fs->meta, page_id, &p) == 0 && !p.committed)
		return open_own(req, fs, page_id, fi);

	/* Gone since the kernel's lookup. Evicted or unlinked: for a reader
	 * that is a cache miss, ENOENT (ESTALE would make the kernel look
	 * again, and under churn the page it finds can be gone too; a second
	 * ESTALE reaches the caller). Replaced by another page of its name (a
	 * rename over it: SGLang's writers publish so): the name never stopped
	 * existing, so ESTALE, and the kernel's second look finds the page
	 * that has it now. ENOENT there failed one open in ten of a key that
	 * another process kept renaming new versions over. */
	if (ret == -ENOENT && meta_page_replaced(fs->meta, page_id))
		ret = -ESTALE;
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	ret = stale_open(fs, ino, &p);
	if (ret == 0)
		ret = meta_pool_get(fs->meta, p.pool_id, &pool);
	if (ret == 0) /* the slot holds p's bytes only while this node is a node */
		ret = meta_lease_hold(fs->meta);
	if (ret == 0 && verify)
		ret = verify_page(fs, &p, &pool, &kept);
	h = ret == 0 ? fs_handle_new(FS_READER) : NULL;
	if (!h) {
		fs_keep_put(&fs->handles, kept);
		meta_slot_unpin(fs->meta, p.pool_id, p.slot);
		return (void)fuse_reply_err(req, ret < 0 ? -ret : ENOMEM);
	}
	h->keeps = kept != NULL;
	h->kept = kept;
	h->ino = ino;
	h->pool_id = p.pool_id;
	h->page_id = p.id;
	h->data_fd = pool.data_fd;
	h->slot_size = pool.slot_size;
	h->page = p;
	h->cached = fs_ino_current(ino, &p) &&
	            (fs->opts->kernel_cache == PAGEFS_CACHE_ALWAYS ||
	             (fs->opts->kernel_cache == PAGEFS_CACHE_REREAD && p.opened));
	fs_handles_add_checked(&fs->handles, h); /* no cache while a writer is open */
	fi->direct_io = !h->cached;
	fi->keep_cache = fs_ino_current(ino, &p); /* an older inode's cache is dropped */
	fi->noflush = 1; /* a reader's flush does nothing: spare close() a round trip */
	reply_open(req, fs, h, fi, NULL);
}

/*
 * A page that is gone (evicted, dropped, unlinked by another kernel path)
 * between the kernel's lookup and an open for writing answers ESTALE, not
 * ENOENT: the kernel then walks the path again with a fresh lookup, so
 * open(O_CREAT|O_TRUNC) creates the name anew. ENOENT here would fail a
 * create over a just-evicted name. A read-only open of a vanished page is
 * a plain miss (ENOENT, open_read).
 */
void pagefs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);
	struct meta_page_info p;
	uint64_t id;
	int ret;

	if (fs_ino_kind(ino, &id) != FS_PAGE)
		return (void)fuse_reply_err(req, EISDIR);
	if ((fi->flags & O_ACCMODE) == O_RDONLY)
		return open_read(req, fs, ino, id, fi);
	ret = meta_page_get(fs->meta, id, &p);
	if (ret == 0 && !p.committed)
		return open_own(req, fs, id, fi);
	if (!(fi->flags & O_TRUNC))
		return (void)fuse_reply_err(req, EPERM);
	if (ret == -ENOENT)
		ret = -ESTALE; /* see pagefs_op_open */
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	open_replace(req, fs, ino, &p, fi);
}

/* Answers a read from the bytes the reader's open checked, if it still
 * keeps them: 1 if answered. The read that reaches their end drops them
 * (a page is mostly read once, front to back). h is not touched after
 * the reply (see struct fs_kept). */
static int read_kept(fuse_req_t req, struct fs_handles *t, struct fs_handle *h, size_t size,
                     uint64_t off)
{
	struct fs_kept *k;

	pthread_mutex_lock(&h->lock);
	k = h->kept;
	if (k && off + size >= k->len)
		h->kept = NULL; /* its reference is now ours */
	else if (k)
		atomic_fetch_add(&k->refs, 1);
	pthread_mutex_unlock(&h->lock);
	if (!k)
		return 0;
	atomic_fetch_add(&t->kept_reads, 1);
	FS_ANSWERED(h);
	fuse_reply_buf(req, k->data + off, size);
	fs_keep_put(t, k);
	return 1;
}

/* A read from a FUSE backing: one pread into this thread's aligned buffer
 * (fs_align.h), so the backing gets one request for up to 1 MiB where
 * libfuse's own copy, into a buffer that starts inside a page, would
 * make two. */
static void read_aligned(fuse_req_t req, struct fs_handle *h, size_t size, uint64_t pos)
{
	char *buf = fs_align_buf();
	size_t got = 0;
	int err = buf ? 0 : ENOMEM;

	while (!err && got < size) {
		ssize_t n = pread(h->data_fd, buf + got, size - got, (off_t)(pos + got));

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			err = errno;
		else if (n == 0)
			break; /* past the data file's end: a short read, as splice gives */
		else
			got += (size_t)n;
	}
	FS_ANSWERED(h);
	if (err)
		fuse_reply_err(req, err);
	else
		fuse_reply_buf(req, buf, got);
}

void pagefs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);
	struct fs_handle *h = fs_handle_of(fi);
	struct fuse_bufvec bv = FUSE_BUFVEC_INIT(0);
	uint64_t slot, length;
	int pending;

	(void)ino;
	if (h->kind == FS_READER) {
		slot = h->page.slot;
		length = h->page.length;
	} else {
		/* O_RDWR writer reading back what it wrote so far, held
		 * bytes included (a failed push shows as the bytes missing:
		 * the close that follows reports it). */
		(void)fs_writer_push(fs, h);
		pthread_mutex_lock(&h->lock);
		slot = h->w.resv.slot;
		pthread_mutex_unlock(&h->lock);
		fs_writer_peek(h, &length, &pending);
	}
	if (off < 0 || (uint64_t)off >= length) {
		FS_ANSWERED(h);
		return (void)fuse_reply_buf(req, NULL, 0);
	}
	if (size > length - (uint64_t)off)
		size = (size_t)(length - (uint64_t)off);
	meta_count_io(fs->meta, h->pool_id, size, 0);
	if (h->keeps && read_kept(req, &fs->handles, h, size, (uint64_t)off))
		return;

	int held = meta_lease_hold(fs->meta); /* see open_read */
	if (held < 0) {
		FS_ANSWERED(h);
		return (void)fuse_reply_err(req, -held);
	}
	uint64_t pos = slot * h->slot_size + (uint64_t)off;
	if (fs->backing_fuse)
		return read_aligned(req, h, size, pos);
	bv.buf[0].size = size;
	bv.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	bv.buf[0].fd = h->data_fd;
	bv.buf[0].pos = (off_t)pos;
	FS_ANSWERED(h);
	fuse_reply_data(req, &bv, FUSE_BUF_SPLICE_MOVE);
}

void pagefs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);
	struct fs_handle *h = fs_handle_of(fi);

	(void)ino;
	FS_RELEASING(h);
	fs_handle_release(fs, h);
	fuse_reply_err(req, 0);
}

void pagefs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct fs_handle *h = fs_handle_of(fi);

	(void)ino;
	(void)datasync;
	if (h->kind == FS_WRITER) {
		int ret = fs_writer_push(fs_of(req), h); /* bytes a write held back */

		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
		if (fdatasync(h->data_fd) < 0)
			return (void)fuse_reply_err(req, errno);
	}
	fuse_reply_err(req, 0);
}

/* Truncate through fi's writer, or the writer of a page being written. */
static int set_size(struct fs_mount *fs, uint64_t page_id, struct fuse_file_info *fi, uint64_t size)
{
	struct fs_handle *h = fs_handle_of(fi);
	struct meta_page_info p;
	int ret;

	if (h)
		return h->kind == FS_WRITER ? fs_writer_truncate(fs, h, size) : -EPERM;
	ret = meta_page_get(fs->meta, page_id, &p);
	if (ret < 0)
		return ret;
	if (p.committed)
		return -EPERM;
	h = fs_handles_find_writer(&fs->handles, page_id);
	if (!h)
		return -ENOENT;
	ret = fs_writer_truncate(fs, h, size);
	fs_handles_put(&fs->handles, h);
	return ret;
}

void pagefs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
	struct fs_mount *fs = fs_of(req);
	struct stat st;
	double timeout;
	uint64_t id;
	int ret;

	/* Mode and times are accepted and ignored; ownership never changes. */
	if (to_set & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID))
		return (void)fuse_reply_err(req, EPERM);
	if (to_set & FUSE_SET_ATTR_SIZE) {
		if (fs_ino_kind(ino, &id) != FS_PAGE)
			return (void)fuse_reply_err(req, EISDIR);
		if (attr->st_size < 0)
			return (void)fuse_reply_err(req, EINVAL);
		ret = set_size(fs, id, fi, (uint64_t)attr->st_size);
		if (ret < 0)
			return (void)fuse_reply_err(req, -ret);
	}
	ret = fs_stat(fs, ino, fi, &st, &timeout);
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fuse_reply_attr(req, &st, timeout);
}
