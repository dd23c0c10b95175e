/*
 * fs_name.c - operations on page names: unlink and rename, and the name
 * operations pagefs does not support (mknod, symlink, link: EPERM).
 *
 * A rename re-keys a page inside its pool without moving bytes and
 * atomically replaces any target; pages cannot move between pools (EXDEV)
 * and directories cannot be renamed at all (EPERM). The kernel updates its
 * own dentries for both, so no invalidation is needed here.
 */
#include <errno.h>
#include <stdio.h> /* RENAME_* with _GNU_SOURCE */

#include "fs/fs_inode.h"

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

void pagefs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	uint64_t pool;
	enum fs_kind kind = fs_ino_kind(parent, &pool);

	if (kind != FS_POOL)
		return (void)fuse_reply_err(req, not_a_pool(kind));
	fuse_reply_err(req, -meta_page_unlink(fs_of(req)->meta, (uint32_t)pool, name));
}

void pagefs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	uint64_t from, to;
	enum fs_kind kind = fs_ino_kind(parent, &from);
	enum fs_kind newkind = fs_ino_kind(newparent, &to);
	int ret;

	if (flags & ~(unsigned int)RENAME_NOREPLACE)
		return (void)fuse_reply_err(req, EINVAL); /* RENAME_EXCHANGE, WHITEOUT */
	if (kind != FS_POOL)                              /* renaming a rank or pool directory */
		return (void)fuse_reply_err(req, kind == FS_PAGE ? ENOTDIR : EPERM);
	if (newkind != FS_POOL)
		return (void)fuse_reply_err(req, not_a_pool(newkind));
	if (from != to)
		return (void)fuse_reply_err(req, EXDEV);
	ret = meta_check_name(newname);
	if (ret == 0)
		ret = meta_page_rename(fs_of(req)->meta, (uint32_t)from, name, newname,
		                       (flags & RENAME_NOREPLACE) != 0);
	fuse_reply_err(req, -ret);
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
