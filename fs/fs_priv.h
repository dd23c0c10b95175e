/*
 * fs_priv.h - what the fs/ files share: the mounted filesystem's state and
 * the FUSE handlers each file provides (pagefs_op_<op>), which fs_main.c
 * wires into one fuse_lowlevel_ops table.
 *
 * Every handler finds the mount with fs_of(req). Handlers reply exactly
 * once, with no fs/ lock held.
 */
#ifndef PAGEFS_FS_PRIV_H
#define PAGEFS_FS_PRIV_H

#ifndef FUSE_USE_VERSION
#define FUSE_USE_VERSION 314
#endif

#include <fuse_lowlevel.h>
#include <sys/types.h>
#include <time.h>

#include "fs/fs.h"
#include "fs/fs_handle.h"
#include "fs/fs_pin.h"

struct fs_inval;

/*
 * One mounted filesystem. Filled in by pagefs_serve() before the session
 * starts serving and read-only afterwards; `handles` has its own lock.
 */
struct fs_mount {
	struct meta *meta;
	const struct pagefs_mount_opts *opts;
	struct fuse_session *se;
	struct fs_inval *inval;    /* sends kernel invalidations (fs_inval.c) */
	struct fs_handles handles; /* open page files (fs_handle.c) */
	struct fs_pins pins;       /* open pool directories and their pins (fs_pin.c) */
	double timeout;            /* entry/attr timeout of dirs and committed pages */
	uid_t uid;                 /* owner reported for every inode */
	gid_t gid;
	pid_t pid;               /* the daemon, for user.pagefs.pid */
	struct timespec mounted; /* root mtime; stats uptime */
	/* The backing directory is itself a FUSE mount (3FS, or the bench's
	 * passthrough_ll): a splice from its direct-I/O files goes to it 4 KiB
	 * a request, so reads are answered from one pread into an aligned
	 * buffer instead, and page bytes reach it from aligned buffers
	 * (fs_align.h). */
	int backing_fuse;
	unsigned max_read; /* the mount's max_read: fs_max_read(), or FS_MAX_WRITE
	                    * when nothing is spliced */
};

static inline struct fs_mount *fs_of(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static inline struct fs_handle *fs_handle_of(const struct fuse_file_info *fi)
{
	/* fi->fh holds the pointer fs_file.c stored. */
	if (!fi)
		return NULL;
	return (struct fs_handle *)(uintptr_t)fi->fh; // NOLINT(performance-no-int-to-ptr)
}

static inline struct fs_dirh *fs_dirh_of(const struct fuse_file_info *fi)
{
	/* fi->fh of a pool directory holds the pointer opendir stored. */
	if (!fi)
		return NULL;
	return (struct fs_dirh *)(uintptr_t)fi->fh; // NOLINT(performance-no-int-to-ptr)
}

/* Builds the user.pagefs.stats document. Returns a malloc'd NUL-terminated
 * string the caller frees, or NULL on ENOMEM. (fs_stats.c) */
char *fs_stats_json(struct fs_mount *fs);

/* fs_inode.c */
void pagefs_op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void pagefs_op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup);
void pagefs_op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets);

/* fs_dir.c */
void pagefs_op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name);
void pagefs_op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void pagefs_op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void pagefs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void pagefs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi);
void pagefs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                           struct fuse_file_info *fi);
void pagefs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void pagefs_op_statfs(fuse_req_t req, fuse_ino_t ino);

/* fs_file.c */
void pagefs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi);
void pagefs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void pagefs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi);
void pagefs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void pagefs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
void pagefs_op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi);

/* fs_write.c */
void pagefs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                     struct fuse_file_info *fi);

/* fs_commit.c */
void pagefs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);

/* fs_name.c */
void pagefs_op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
void pagefs_op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags);
void pagefs_op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev);
void pagefs_op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name);
void pagefs_op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname);

/* fs_xattr.c */
void pagefs_op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size);
void pagefs_op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size);
void pagefs_op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags);
void pagefs_op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name);

/* fs_ioctl.c */
/* fs_batchw.c: RESERVE and COMMIT of the ioctl channel on pool
 * directory handle d (pagefs_ioctl.h); 0 with the reply in out and *len
 * set, or -errno. */
struct pagefs_ioc_hdr;
int fs_batchw_reserve(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id, const char **names,
                      struct pagefs_ioc_hdr *h, char *out, size_t *len);
int fs_batchw_commit(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id, const char *in,
                     struct pagefs_ioc_hdr *h, char *out, size_t *len);
void pagefs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
                     size_t out_bufsz);

#endif
