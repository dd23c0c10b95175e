/*
 * fs_inode.h - inode numbers and attributes.
 *
 * An inode number encodes what it names, so no inode table is kept:
 *
 *   1                              the root (FUSE_ROOT_ID)
 *   (1 << 32) + rank               a rank directory, rank 0..65535
 *   (2 << 32) + pool_id            a pool directory
 *   ((version + 1) << 48) + page_id  a page file (page_id < 2^48)
 *
 * Pool and page ids come from the index and survive remounts, so st_ino
 * is stable: a page that was never replaced in place (version 0) is
 * (1 << 48) + page_id.
 *
 * A page replaced in place (open with O_TRUNC) keeps its id but changes
 * its bytes and length, so each such version (meta_page_info.version,
 * counted per mount, 15 bits) gets an inode of its own: the attributes
 * the kernel caches for an inode then describe one immutable version, and
 * an fstat by a reader of the old version keeps matching what it reads.
 * An older version's inode may still be reached through a name the
 * kernel caches until fs_inval drops it: stat gives the current version's
 * attributes, uncached (or, for an fstat, those its reader pinned), and
 * open reads the current version through it unless a reader of the older
 * one still has it open (then ESTALE: the kernel looks the name up again
 * and retries; see fs_file.c).
 *
 * Generations: a page's is the mount epoch it was created in
 * (meta_page_info.gen); directories use 1.
 */
#ifndef PAGEFS_FS_INODE_H
#define PAGEFS_FS_INODE_H

#include "fs/fs_priv.h"

#define FS_INO_RANK_BASE (1ULL << 32)
#define FS_INO_POOL_BASE (2ULL << 32)
#define FS_INO_PAGE_BASE (1ULL << 48)

#define FS_BLKSIZE 131072

enum fs_kind { FS_BAD, FS_ROOT, FS_RANK, FS_POOL, FS_PAGE };

static inline fuse_ino_t fs_ino_rank(int rank)
{
	return FS_INO_RANK_BASE + (uint64_t)rank;
}

static inline fuse_ino_t fs_ino_pool(uint32_t pool_id)
{
	return FS_INO_POOL_BASE + pool_id;
}

#define FS_PAGE_ID_MASK (FS_INO_PAGE_BASE - 1)
#define FS_PAGE_VERSION_MASK 0x7fffU

static inline fuse_ino_t fs_ino_page(uint64_t page_id, uint32_t version)
{
	return ((uint64_t)((version & FS_PAGE_VERSION_MASK) + 1) << 48) |
	       (page_id & FS_PAGE_ID_MASK);
}

/* The version a page inode names. */
static inline uint32_t fs_ino_version(fuse_ino_t ino)
{
	return (uint32_t)((ino >> 48) - 1);
}

/* 1 if page inode ino names the current version of page p. */
static inline int fs_ino_current(fuse_ino_t ino, const struct meta_page_info *p)
{
	return (p->version & FS_PAGE_VERSION_MASK) == fs_ino_version(ino);
}

/* What ino names; *id gets the rank, pool id or page id. */
enum fs_kind fs_ino_kind(fuse_ino_t ino, uint64_t *id);

/* Attributes of a directory inode. A pool's mtime and ctime are its
 * (meta_pool_info.mtime_ns, read after noting that the kernel gets
 * them: fs_inval_pool_served); the others' the mount's time. */
void fs_attr_dir(const struct fs_mount *fs, fuse_ino_t ino, struct stat *st);
/* Attributes of page p (as inode number: its current version);
 * `writing` reports a page still being written (mode 0644) whose current
 * length is `length`. */
void fs_attr_page(const struct fs_mount *fs, const struct meta_page_info *p, int writing,
                  uint64_t length, struct stat *st);

/* A reply entry for a directory (timeouts = the mount's). */
void fs_entry_dir(const struct fs_mount *fs, fuse_ino_t ino, struct fuse_entry_param *e);
/* A reply entry for committed page p (timeouts = the mount's). */
void fs_entry_page(const struct fs_mount *fs, const struct meta_page_info *p,
                   struct fuse_entry_param *e);

/*
 * Current attributes of any inode. fi (may be NULL) is the open file the
 * request came through: a reader sees the version it opened, a writer its
 * own length. *timeout gets how long the kernel may keep them. 0, -ENOENT
 * or -errno.
 */
int fs_stat(struct fs_mount *fs, fuse_ino_t ino, struct fuse_file_info *fi, struct stat *st,
            double *timeout);

#endif
