/*
 * fs_inode.c - the inode number scheme (see fs_inode.h), attributes, and
 * the inode-level requests getattr, forget and forget_multi.
 *
 * No lookup counts are kept: meta keeps every pool and page in memory and
 * page ids are never reused within a mount, so an inode number can always
 * be resolved by asking meta and there is nothing to free when the kernel
 * forgets one. forget and forget_multi therefore only acknowledge.
 *
 * A page still being written has no committed length in the index; its
 * size comes from the writer's handle (the fi of an fstat, or the writers
 * table) and is reported with timeout 0 so every stat asks again.
 */
#include "fs/fs_inode.h"
#include "fs/fs_inval.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>

enum fs_kind fs_ino_kind(fuse_ino_t ino, uint64_t *id)
{
	uint64_t n = ino;

	*id = 0;
	if (n == FUSE_ROOT_ID)
		return FS_ROOT;
	if (n >= FS_INO_PAGE_BASE) {
		*id = n & FS_PAGE_ID_MASK;
		return FS_PAGE;
	}
	if (n >= FS_INO_POOL_BASE && n - FS_INO_POOL_BASE <= UINT32_MAX) {
		*id = n - FS_INO_POOL_BASE;
		return FS_POOL;
	}
	if (n >= FS_INO_RANK_BASE && n - FS_INO_RANK_BASE <= META_RANK_MAX) {
		*id = n - FS_INO_RANK_BASE;
		return FS_RANK;
	}
	return FS_BAD;
}

static struct timespec ns_to_ts(int64_t ns)
{
	struct timespec ts;

	if (ns < 0)
		ns = 0;
	ts.tv_sec = (time_t)(ns / 1000000000);
	ts.tv_nsec = (long)(ns % 1000000000);
	return ts;
}

void fs_attr_dir(const struct fs_mount *fs, fuse_ino_t ino, struct stat *st)
{
	struct meta_pool_info pool;
	int64_t mtime_ns = 0;
	uint64_t id;

	if (fs_ino_kind(ino, &id) == FS_POOL) {
		fs_inval_pool_served(fs->inval, (uint32_t)id); /* before the times are read */
		if (meta_pool_get(fs->meta, (uint32_t)id, &pool) == 0)
			mtime_ns = pool.mtime_ns;
	}
	memset(st, 0, sizeof(*st));
	st->st_ino = ino;
	st->st_mode = S_IFDIR | 0755;
	st->st_nlink = 2;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_size = 4096;
	st->st_blocks = 8;
	st->st_blksize = FS_BLKSIZE;
	st->st_atim = fs->mounted;
	st->st_mtim = mtime_ns > 0 ? ns_to_ts(mtime_ns) : fs->mounted;
	st->st_ctim = st->st_mtim;
}

void fs_attr_page(const struct fs_mount *fs, const struct meta_page_info *p, int writing,
                  uint64_t length, struct stat *st)
{
	memset(st, 0, sizeof(*st));
	st->st_ino = fs_ino_page(p->id, p->version);
	st->st_mode = S_IFREG | (writing ? 0644 : 0444);
	st->st_nlink = 1;
	st->st_uid = fs->uid;
	st->st_gid = fs->gid;
	st->st_size = (off_t)length;
	st->st_blocks = (blkcnt_t)((length + 511) / 512);
	st->st_blksize = FS_BLKSIZE;
	st->st_mtim = ns_to_ts(p->mtime_ns);
	st->st_ctim = p->ctime_ns > p->mtime_ns ? ns_to_ts(p->ctime_ns) : st->st_mtim;
	st->st_atim = ns_to_ts(p->atime_ns);
	if (writing && p->mtime_ns == 0) {
		/* Never committed: it is being written now. */
		clock_gettime(CLOCK_REALTIME, &st->st_mtim);
		st->st_ctim = st->st_mtim;
		st->st_atim = st->st_mtim;
	}
}

void fs_entry_dir(const struct fs_mount *fs, fuse_ino_t ino, struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = ino;
	e->generation = 1;
	e->entry_timeout = fs->timeout;
	e->attr_timeout = fs->timeout;
	fs_attr_dir(fs, ino, &e->attr);
}

void fs_entry_page(const struct fs_mount *fs, const struct meta_page_info *p,
                   struct fuse_entry_param *e)
{
	memset(e, 0, sizeof(*e));
	e->ino = fs_ino_page(p->id, p->version);
	e->generation = p->gen;
	e->entry_timeout = fs->timeout;
	e->attr_timeout = fs->timeout;
	fs_attr_page(fs, p, 0, p->length, &e->attr);
}

static int dir_exists(struct fs_mount *fs, enum fs_kind kind, uint64_t id)
{
	struct meta_pool_info pool;

	switch (kind) {
	case FS_ROOT:
		return 0;
	case FS_RANK:
		return meta_rank_exists(fs->meta, (int)id) ? 0 : -ENOENT;
	case FS_POOL:
		return meta_pool_get(fs->meta, (uint32_t)id, &pool);
	default:
		return -ENOENT;
	}
}

/* The attributes a reader of page_id through inode ino pinned: for an
 * fstat (the kernel sends no file handle with it) of a page that was
 * removed or replaced since. 0, or -ENOENT if no such reader is open. */
static int reader_stat(struct fs_mount *fs, fuse_ino_t ino, uint64_t page_id, struct stat *st)
{
	struct fs_handle *h = fs_handles_find_reader(&fs->handles, page_id, ino);

	if (!h)
		return -ENOENT;
	fs_attr_page(fs, &h->page, 0, h->page.length, st);
	st->st_ino = ino;
	st->st_nlink = 0; /* no name reaches this version any more, as after unlink */
	fs_handles_put(&fs->handles, h);
	return 0;
}

static int page_stat(struct fs_mount *fs, fuse_ino_t ino, uint64_t page_id,
                     struct fuse_file_info *fi, struct stat *st, double *timeout)
{
	struct fs_handle *h = fs_handle_of(fi);
	struct meta_page_info p;
	uint64_t length;
	int pending = 0;
	int ret;

	/* A reader's version is immutable, whatever happened to the page. */
	if (h && h->kind == FS_READER) {
		fs_attr_page(fs, &h->page, 0, h->page.length, st);
		st->st_ino = ino;
		*timeout = fs->timeout;
		return 0;
	}
	ret = meta_page_get(fs->meta, page_id, &p);
	if (ret == 0 && (h || !p.committed)) {
		/* Being written: the writer's own length. */
		length = p.length;
		if (h) {
			fs_writer_peek(h, &length, &pending);
		} else {
			h = fs_handles_find_writer(&fs->handles, page_id);
			if (h) {
				fs_writer_peek(h, &length, &pending);
				fs_handles_put(&fs->handles, h);
			}
			pending = 1;
		}
		fs_attr_page(fs, &p, pending, pending ? length : p.length, st);
		*timeout = 0;
	} else if (ret == 0 && fs_ino_current(ino, &p)) {
		fs_attr_page(fs, &p, 0, p.length, st);
		*timeout = fs->timeout;
	} else {
		/* Removed, or an older version: what its reader sees, else
		 * the current version, asked again next time (the kernel's
		 * entry for the name is being invalidated). */
		*timeout = 0;
		if (reader_stat(fs, ino, page_id, st) == 0)
			return 0;
		/* Replaced by another page of its name: the name exists, the
		 * kernel looks it up again (see open_read). */
		if (ret == -ENOENT && meta_page_replaced(fs->meta, page_id))
			return -ESTALE;
		if (ret < 0)
			return ret;
		fs_attr_page(fs, &p, 0, p.length, st);
	}
	st->st_ino = ino;
	return 0;
}

int fs_stat(struct fs_mount *fs, fuse_ino_t ino, struct fuse_file_info *fi, struct stat *st,
            double *timeout)
{
	uint64_t id;
	enum fs_kind kind = fs_ino_kind(ino, &id);
	int ret;

	if (kind == FS_PAGE)
		return page_stat(fs, ino, id, fi, st, timeout);
	ret = dir_exists(fs, kind, id);
	if (ret < 0)
		return ret;
	fs_attr_dir(fs, ino, st);
	*timeout = fs->timeout;
	return 0;
}

void pagefs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct stat st;
	double timeout;
	int ret = fs_stat(fs_of(req), ino, fi, &st, &timeout);

	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fuse_reply_attr(req, &st, timeout);
}

void pagefs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	(void)ino;
	(void)nlookup;
	fuse_reply_none(req);
}

void pagefs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	(void)count;
	(void)forgets;
	fuse_reply_none(req);
}
