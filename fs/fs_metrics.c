/*
 * fs_metrics.c - FUSE request latency by operation (a histogram per
 * handler, hist.h: no lock, per-thread shards) and the mount's phase for
 * GET /ready.
 *
 * A timed handler is measured from its call to its return; every pagefs
 * handler replies before it returns, so that is the daemon's share of
 * the request (the kernel's queueing is not in it).
 */
#include "fs/fs_metrics.h"

#include "meta/hist.h"

#include <errno.h>
#include <stdatomic.h>
#include <string.h>

/* The handlers timed, in the order of op_names. */
enum fs_op {
	OP_INIT_UNUSED,
	OP_LOOKUP,
	OP_FORGET,
	OP_FORGET_MULTI,
	OP_GETATTR,
	OP_SETATTR,
	OP_MKNOD,
	OP_MKDIR,
	OP_UNLINK,
	OP_RMDIR,
	OP_SYMLINK,
	OP_RENAME,
	OP_LINK,
	OP_CREATE,
	OP_OPEN,
	OP_READ,
	OP_WRITE,
	OP_FLUSH,
	OP_RELEASE,
	OP_FSYNC,
	OP_OPENDIR,
	OP_READDIR,
	OP_READDIRPLUS,
	OP_RELEASEDIR,
	OP_STATFS,
	OP_SETXATTR,
	OP_GETXATTR,
	OP_LISTXATTR,
	OP_REMOVEXATTR,
	OP_COUNT,
};

static const char *const op_names[OP_COUNT] = {
	"init",    "lookup",   "forget",   "forget_multi", "getattr",     "setattr",
	"mknod",   "mkdir",    "unlink",   "rmdir",        "symlink",     "rename",
	"link",    "create",   "open",     "read",         "write",       "flush",
	"release", "fsync",    "opendir",  "readdir",      "readdirplus", "releasedir",
	"statfs",  "setxattr", "getxattr", "listxattr",    "removexattr",
};

static struct hist op_hist[OP_COUNT] = {[0 ... OP_COUNT - 1] = {.bounds = &hist_latency_ns}};
static const struct fuse_lowlevel_ops *real_ops;
static struct fuse_lowlevel_ops timed_ops;
static _Atomic int phase; /* enum fs_phase */

#define TIMED(op, OPC, params, args)                                                               \
	static void timed_##op params                                                              \
	{                                                                                          \
		uint64_t t0 = hist_now_ns();                                                       \
		real_ops->op args;                                                                 \
		hist_observe(&op_hist[OPC], hist_now_ns() - t0);                                   \
	}

TIMED(lookup, OP_LOOKUP, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(forget, OP_FORGET, (fuse_req_t req, fuse_ino_t i, uint64_t n), (req, i, n))
TIMED(forget_multi, OP_FORGET_MULTI, (fuse_req_t req, size_t c, struct fuse_forget_data *f),
      (req, c, f))
TIMED(getattr, OP_GETATTR, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(setattr, OP_SETATTR,
      (fuse_req_t req, fuse_ino_t i, struct stat *a, int s, struct fuse_file_info *fi),
      (req, i, a, s, fi))
TIMED(mknod, OP_MKNOD, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, dev_t d),
      (req, p, n, m, d))
TIMED(mkdir, OP_MKDIR, (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m), (req, p, n, m))
TIMED(unlink, OP_UNLINK, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(rmdir, OP_RMDIR, (fuse_req_t req, fuse_ino_t p, const char *n), (req, p, n))
TIMED(symlink, OP_SYMLINK, (fuse_req_t req, const char *l, fuse_ino_t p, const char *n),
      (req, l, p, n))
TIMED(rename, OP_RENAME,
      (fuse_req_t req, fuse_ino_t p, const char *n, fuse_ino_t np, const char *nn, unsigned f),
      (req, p, n, np, nn, f))
TIMED(link, OP_LINK, (fuse_req_t req, fuse_ino_t i, fuse_ino_t np, const char *nn),
      (req, i, np, nn))
TIMED(create, OP_CREATE,
      (fuse_req_t req, fuse_ino_t p, const char *n, mode_t m, struct fuse_file_info *fi),
      (req, p, n, m, fi))
TIMED(open, OP_OPEN, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(read, OP_READ, (fuse_req_t req, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *fi),
      (req, i, s, o, fi))
TIMED(write, OP_WRITE,
      (fuse_req_t req, fuse_ino_t i, const char *b, size_t s, off_t o, struct fuse_file_info *fi),
      (req, i, b, s, o, fi))
TIMED(flush, OP_FLUSH, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(release, OP_RELEASE, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(fsync, OP_FSYNC, (fuse_req_t req, fuse_ino_t i, int d, struct fuse_file_info *fi),
      (req, i, d, fi))
TIMED(opendir, OP_OPENDIR, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi), (req, i, fi))
TIMED(readdir, OP_READDIR,
      (fuse_req_t req, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *fi),
      (req, i, s, o, fi))
TIMED(readdirplus, OP_READDIRPLUS,
      (fuse_req_t req, fuse_ino_t i, size_t s, off_t o, struct fuse_file_info *fi),
      (req, i, s, o, fi))
TIMED(releasedir, OP_RELEASEDIR, (fuse_req_t req, fuse_ino_t i, struct fuse_file_info *fi),
      (req, i, fi))
TIMED(statfs, OP_STATFS, (fuse_req_t req, fuse_ino_t i), (req, i))
TIMED(setxattr, OP_SETXATTR,
      (fuse_req_t req, fuse_ino_t i, const char *n, const char *v, size_t s, int f),
      (req, i, n, v, s, f))
TIMED(getxattr, OP_GETXATTR, (fuse_req_t req, fuse_ino_t i, const char *n, size_t s),
      (req, i, n, s))
TIMED(listxattr, OP_LISTXATTR, (fuse_req_t req, fuse_ino_t i, size_t s), (req, i, s))
TIMED(removexattr, OP_REMOVEXATTR, (fuse_req_t req, fuse_ino_t i, const char *n), (req, i, n))

#define WRAP(op)                                                                                   \
	do {                                                                                       \
		if (real->op)                                                                      \
			timed_ops.op = timed_##op;                                                 \
	} while (0)

const struct fuse_lowlevel_ops *fs_metrics_ops(const struct fuse_lowlevel_ops *real)
{
	real_ops = real;
	timed_ops = *real; /* init, destroy and anything not listed: untimed */
	WRAP(lookup);
	WRAP(forget);
	WRAP(forget_multi);
	WRAP(getattr);
	WRAP(setattr);
	WRAP(mknod);
	WRAP(mkdir);
	WRAP(unlink);
	WRAP(rmdir);
	WRAP(symlink);
	WRAP(rename);
	WRAP(link);
	WRAP(create);
	WRAP(open);
	WRAP(read);
	WRAP(write);
	WRAP(flush);
	WRAP(release);
	WRAP(fsync);
	WRAP(opendir);
	WRAP(readdir);
	WRAP(readdirplus);
	WRAP(releasedir);
	WRAP(statfs);
	WRAP(setxattr);
	WRAP(getxattr);
	WRAP(listxattr);
	WRAP(removexattr);
	return &timed_ops;
}

void fs_metrics_phase(enum fs_phase p)
{
	atomic_store(&phase, (int)p);
}

void fs_metrics_write(FILE *out)
{
	char labels[64];

	hist_family(out, "pagefs_mount_serving", "gauge",
	            "1 while the mount answers requests (0 while starting or stopping).");
	fprintf(out, "pagefs_mount_serving %d\n", atomic_load(&phase) == FS_PHASE_SERVING);
	hist_family(out, "pagefs_fuse_request_duration_seconds", "histogram",
	            "Time the daemon took to answer a FUSE request, by operation.");
	for (int i = 1; i < OP_COUNT && real_ops; i++) {
		snprintf(labels, sizeof(labels), "op=\"%s\"", op_names[i]);
		hist_write(out, "pagefs_fuse_request_duration_seconds", labels, &op_hist[i]);
	}
}

int fs_metrics_ready(char *why, size_t len)
{
	int p = atomic_load(&phase);

	if (p == FS_PHASE_SERVING)
		return 0;
	snprintf(why, len, "%s",
	         p == FS_PHASE_STARTING ? "the mount is starting" : "the mount is stopping");
	return -EAGAIN;
}
