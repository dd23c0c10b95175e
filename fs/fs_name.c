/*
 * fs_name.c - operations on page names: unlink and rename, and the name
 * operations pagefs does not support (mknod, symlink, link: EPERM).
 *
 * A rename re-keys a page inside its pool without moving bytes and
 * atomically replaces any target; pages cannot move between pools (EXDEV)
 * and directories cannot be renamed at all (EPERM). The kernel updates its
 * own dentries for both, so no invalidation is needed here.
 *
 * A page still being written is its writer's alone (docs/DECISIONS-posix.md):
 * other processes do not see its name, but the writer's process may
 * unlink it (its close then publishes nothing) or rename it (its close
 * publishes under the new name). So both act on the name's committed page
 * and on the pages the caller's process is writing under that name. A
 * writer is marked busy meanwhile, so its close waits and then commits
 * under the name (or not at all) that the unlink or rename left.
 */
#include <errno.h>
#include <stdio.h> /* RENAME_* with _GNU_SOURCE */

#include "fs/fs_inode.h"

#include <string.h>

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif

/* The errno for a page operation under a directory that is not a pool. */
static int not_a_pool(enum fs_kind kind)
{
	switch (kind) {
	case FS_ROOT:
	case FS_RANK:
		return EPERM;
	case FS_PAGE:
		return ENOTDIR;
	default:
		return ENOENT;
	}
}

int fs_writer_thread(struct fs_handle *h, pid_t tid)
{
	pthread_mutex_lock(&h->lock);
	int mine = tid > 0 && (tid == h->w.owner_tid || tid == h->w.writer_tid);
	pthread_mutex_unlock(&h->lock);
	return mine;
}

int fs_writers_owned(struct fs_mount *fs, uint32_t pool_id, const char *name, pid_t tid,
                     struct fs_handle **out, int max)
{
	uint64_t ids[FS_OWN_MAX];
	int n = meta_page_pending(fs->meta, pool_id, name, ids, FS_OWN_MAX), found = 0;

	for (int i = 0; i < n && i < FS_OWN_MAX && found < max; i++) {
		struct fs_handle *h = fs_handles_find_writer(&fs->handles, ids[i]);

		if (h && fs_writer_thread(h, tid))
			out[found++] = h;
		else if (h)
			fs_handles_put(&fs->handles, h);
	}
	return found;
}

/* Unlinks (to NULL) or renames the page writer h is still writing, while
 * h waits: 0, or -ENOENT when it was published or given up meanwhile (the
 * caller then finds it committed, or not at all). Drops the caller's
 * reference to h. */
static int pending_op(struct fs_mount *fs, struct fs_handle *h, const char *to, int noreplace)
{
	int ret = -ENOENT;

	pthread_mutex_lock(&h->lock);
	while (h->w.state == FS_W_BUSY)
		pthread_cond_wait(&h->idle, &h->lock);
	int open = h->w.state == FS_W_OPEN;
	if (open)
		h->w.state = FS_W_BUSY;
	pthread_mutex_unlock(&h->lock);
	if (open) {
		ret = to ? meta_page_rename_pending(fs->meta, h->page_id, to, noreplace)
		         : meta_page_unlink_pending(fs->meta, h->page_id);
		pthread_mutex_lock(&h->lock);
		h->w.state = FS_W_OPEN;
		if (ret == 0 && to)
			snprintf(h->name, sizeof(h->name), "%s", to);
		pthread_cond_broadcast(&h->idle);
		pthread_mutex_unlock(&h->lock);
	}
	fs_handles_put(&fs->handles, h);
	return ret;
}

void pagefs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fs_mount *fs = fs_of(req);
	struct fs_handle *mine[FS_OWN_MAX];
	uint64_t pool;
	enum fs_kind kind = fs_ino_kind(parent, &pool);
	int n, gone = 0, ret;

	if (kind != FS_POOL)
		return (void)fuse_reply_err(req, not_a_pool(kind));
	n = fs_writers_owned(fs, (uint32_t)pool, name, fuse_req_ctx(req)->pid, mine, FS_OWN_MAX);
	for (int i = 0; i < n; i++)
		gone += pending_op(fs, mine[i], NULL, 0) == 0;
	/* Then the committed page (one of the writers may have published
	 * meanwhile). */
	ret = meta_page_unlink(fs->meta, (uint32_t)pool, name);
	fuse_reply_err(req, ret == -ENOENT && gone ? 0 : -ret);
}

/* Renames the pages the caller's process is still writing under `name`;
 * *moved counts them. 0, or -EEXIST (noreplace, and newname has a
 * committed page: nothing was renamed). */
static int rename_own(fuse_req_t req, uint32_t pool, const char *name, const char *newname,
                      int noreplace, int *moved)
{
	struct fs_mount *fs = fs_of(req);
	struct fs_handle *mine[FS_OWN_MAX];
	int n = fs_writers_owned(fs, pool, name, fuse_req_ctx(req)->pid, mine, FS_OWN_MAX);
	int ret = 0;

	for (int i = 0; i < n; i++) {
		if (ret < 0) {
			fs_handles_put(&fs->handles, mine[i]);
			continue;
		}
		ret = pending_op(fs, mine[i], newname, noreplace);
		*moved += ret == 0;
		if (ret != -EEXIST)
			ret = 0; /* (-ENOENT: published or given up meanwhile) */
	}
	return ret;
}

void pagefs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	uint64_t from, to;
	enum fs_kind kind = fs_ino_kind(parent, &from);
	enum fs_kind newkind = fs_ino_kind(newparent, &to);
	int ret, moved = 0;

	if (flags & ~(unsigned int)RENAME_NOREPLACE)
		return (void)fuse_reply_err(req, EINVAL); /* RENAME_EXCHANGE, WHITEOUT */
	if (kind != FS_POOL)                              /* renaming a rank or pool directory */
		return (void)fuse_reply_err(req, kind == FS_PAGE ? ENOTDIR : EPERM);
	if (newkind != FS_POOL)
		return (void)fuse_reply_err(req, not_a_pool(newkind));
	if (from != to)
		return (void)fuse_reply_err(req, EXDEV);
	ret = meta_check_name(newname);
	if (ret == 0 && strcmp(name, newname) != 0)
		ret = rename_own(req, (uint32_t)from, name, newname,
		                 (flags & RENAME_NOREPLACE) != 0, &moved);
	if (ret == 0)
		ret = meta_page_rename(fs_of(req)->meta, (uint32_t)from, name, newname,
		                       (flags & RENAME_NOREPLACE) != 0);
	fuse_reply_err(req, ret == -ENOENT && moved ? 0 : -ret);
}

void pagefs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	(void)parent;
	(void)name;
	(void)mode;
	(void)rdev;
	fuse_reply_err(req, EPERM);
}

void pagefs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	(void)link;
	(void)parent;
	(void)name;
	fuse_reply_err(req, EPERM);
}

void pagefs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	(void)ino;
	(void)newparent;
	(void)newname;
	fuse_reply_err(req, EPERM);
}
