/*
 * fs_main.c - pagefs_serve(): open the index, mount, serve, tear down; the
 * FUSE init negotiation and the table of handlers.
 *
 * How fs/ maps files to slots
 * ---------------------------
 * meta/ maps a (pool, name) to a page and a page to a slot: bytes
 * [slot * slot_size, + length) of the pool's data file on the backing
 * mount. fs/ keeps no index state of its own; inode numbers encode what
 * they name (fs_inode.h), so every request resolves its inode through
 * meta's in-memory tables and nothing has to be remembered per lookup.
 *
 * Life of a writer handle
 * -----------------------
 *   create   meta_page_reserve: a slot held for this writer, invisible to
 *            lookups; the kernel gets the inode with timeouts 0, so other
 *            processes keep getting ENOENT for the name.
 *            (open(O_TRUNC) of a committed page reserves a replacement.)
 *   write    pwrite into the slot; the handle tracks length, holes and an
 *            XXH3 stream of in-order bytes (fs_write.c).
 *   flush    THE COMMIT POINT, since close() waits for it: checksum,
 *            optional fdatasync, meta_page_commit (durable on return).
 *            A flush from a task being killed aborts instead; one from a
 *            process that neither opened nor wrote the file (a fork()ed
 *            child closing its copy) is ignored (fs_commit.c). Later
 *            flushes of dup'd descriptors answer 0; a later write starts
 *            an in-place replacement (fs_write.c).
 *   release  aborts a reservation nobody committed; frees the handle.
 *
 * Life of a reader handle: open pins the committed slot (and verifies
 * the checksum when meta asks), reads are spliced from the data file,
 * release unpins. A pinned slot is never reused, so an open page keeps
 * its bytes through unlink, eviction and replacement. Page files use
 * direct I/O (fs_file.c says why), and a page replaced in place gets a
 * new inode number per version (fs_inode.h), so a reader's size and
 * bytes always belong to the version it opened.
 *
 * Kernel caches: directories and committed pages are cached for
 * opts->entry_timeout, negative lookups in pools too (fs_dir.c). What
 * changes behind the kernel's back - pages the engine evicts or drops
 * after a checksum failure, names whose page was replaced in place - is
 * invalidated by the fs_inval thread, never from a request handler (the
 * one exception, an inode invalidation that takes no directory lock, is
 * explained in fs_file.c).
 *
 * Locks
 * -----
 * fs/ has three mutexes, all leaves: fs_handles.lock (the table of open
 * handles), fs_handle.lock (one writer's state) and the fs_inval queue
 * lock. None is held while taking another, calling meta_* or replying.
 * Where a writer must call meta (commit, re-reserve) it marks itself
 * FS_W_BUSY under its lock and drops the lock; other requests of that
 * handle wait on its `idle` condition. meta's own locks are below all of
 * this: meta never calls back into fs/ except the drop callback, which
 * only queues to fs_inval.
 */
#include <errno.h>
#include <limits.h>
#include <linux/magic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "fs/fs_inode.h"
#include "fs/fs_inval.h"
#include "fs/fs_metrics.h"
#include "fs/fs_recv.h"
#include "meta/log.h"

#define FS_DEFAULT_THREADS 16

/*
 * The largest read the kernel may send us. Reads are spliced from the data
 * file through a pipe, and libfuse falls back to pread + writev (two
 * copies instead of one) whenever a reply does not fit its pipe. A pipe
 * grows only to /proc/sys/fs/pipe-max-size (1 MiB by default) without
 * CAP_SYS_RESOURCE, and the reply header needs room too, so the read size
 * is the largest power of two up to FS_MAX_WRITE that leaves 64 KiB of
 * headroom in a pipe of that size.
 */
unsigned fs_max_read(void)
{
	static unsigned cached; /* the mount option and init must agree */
	unsigned long long max = 1 << 20;
	unsigned size = FS_MAX_WRITE;
	FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");

	if (f) {
		if (fscanf(f, "%llu", &max) != 1)
			max = 1 << 20;
		fclose(f);
	}
	while (size > 65536 && size + 65536ULL > max)
		size /= 2;
	if (!cached)
		cached = size;
	return cached;
}

static void pagefs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	const struct fs_mount *fs = userdata;
	unsigned want = FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
	                FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_READDIRPLUS;

	conn->want |= want & conn->capable;
	conn->want &= ~(unsigned)(FUSE_CAP_WRITEBACK_CACHE | FUSE_CAP_SPLICE_READ);
	conn->max_write = FS_MAX_WRITE;
	conn->max_read = fs->max_read; /* libfuse insists it equals -o max_read */
	if (!(conn->capable & FUSE_CAP_ATOMIC_O_TRUNC))
		log_warn("the kernel cannot pass O_TRUNC to open: replacing a page in place "
		         "with open(O_TRUNC) will fail with EPERM");
}

static const struct fuse_lowlevel_ops pagefs_ops = {
	.init = pagefs_op_init,
	.lookup = pagefs_op_lookup,
	.forget = pagefs_op_forget,
	.forget_multi = pagefs_op_forget_multi,
	.getattr = pagefs_op_getattr,
	.setattr = pagefs_op_setattr,
	.mknod = pagefs_op_mknod,
	.mkdir = pagefs_op_mkdir,
	.unlink = pagefs_op_unlink,
	.rmdir = pagefs_op_rmdir,
	.symlink = pagefs_op_symlink,
	.rename = pagefs_op_rename,
	.link = pagefs_op_link,
	.create = pagefs_op_create,
	.open = pagefs_op_open,
	.read = pagefs_op_read,
	.write = pagefs_op_write,
	.flush = pagefs_op_flush,
	.release = pagefs_op_release,
	.fsync = pagefs_op_fsync,
	.opendir = pagefs_op_opendir,
	.readdir = pagefs_op_readdir,
	.readdirplus = pagefs_op_readdirplus,
	.releasedir = pagefs_op_releasedir,
	.statfs = pagefs_op_statfs,
	.setxattr = pagefs_op_setxattr,
	.getxattr = pagefs_op_getxattr,
	.listxattr = pagefs_op_listxattr,
	.removexattr = pagefs_op_removexattr,
	.ioctl = pagefs_op_ioctl,
};

/* Appends s to out with ',' and '\' escaped for a -o option list. */
static size_t append_escaped(char *out, size_t len, size_t size, const char *s)
{
	for (; *s && len + 2 < size; s++) {
		if (*s == ',' || *s == '\\')
			out[len++] = '\\';
		out[len++] = *s;
	}
	out[len] = '\0';
	return len;
}

/* The fuse_session_new arguments for o. 0 or -ENOMEM. */
static int build_args(const struct pagefs_mount_opts *o, unsigned max_read, struct fuse_args *args)
{
	char opts[2 * PATH_MAX + 128];
	size_t len;

	len = (size_t)snprintf(opts, sizeof(opts), "fsname=pagefs:");
	len = append_escaped(opts, len, sizeof(opts), o->meta.backing ? o->meta.backing : "");
	snprintf(opts + len, sizeof(opts) - len, ",subtype=pagefs,max_read=%u%s%s", max_read,
	         o->allow_other ? ",allow_other,default_permissions" : "",
	         o->read_only ? ",ro" : "");
	if (fuse_opt_add_arg(args, "pagefs") || fuse_opt_add_arg(args, "-o") ||
	    fuse_opt_add_arg(args, opts) || (o->debug && fuse_opt_add_arg(args, "-d")))
		return -ENOMEM;
	return 0;
}

/* Checks the mount point before mounting, so the error names the fix. */
static int check_mountpoint(const char *path, char *msg, size_t len)
{
	struct stat st;

	if (stat(path, &st) == 0) {
		if (S_ISDIR(st.st_mode))
			return 0;
		snprintf(msg, len, "mount point %s is not a directory", path);
		return -ENOTDIR;
	}
	if (errno == ENOENT)
		snprintf(msg, len, "mount point %s does not exist; create it with 'mkdir -p %s'",
		         path, path);
	else if (errno == ENOTCONN)
		snprintf(msg, len,
		         "mount point %s is a dead FUSE mount; unmount it with 'fusermount3 -u %s'",
		         path, path);
	else
		snprintf(msg, len, "cannot use mount point %s: %s", path, strerror(errno));
	return -errno;
}

/* Unpins and aborts what open handles still hold; the kernel will send
 * no more releases. */
static void close_all_handles(struct fs_mount *fs)
{
	struct fs_handle *h;

	while ((h = fs_handles_pop(&fs->handles))) {
		fs_handle_close(fs, h);
		fs_handles_put(&fs->handles, h);
	}
}

/* Serves the mounted session until unmount or a signal. 0 or 1. */
static int serve(struct fs_mount *fs)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	int threads = fs->opts->threads > 0 ? fs->opts->threads : FS_DEFAULT_THREADS;
	int ret;

	if (!cfg) {
		log_error("cannot serve %s: out of memory", fs->opts->mountpoint);
		return 1;
	}
	fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
	fuse_loop_cfg_set_clone_fd(cfg, 0);
	ret = fuse_session_loop_mt(fs->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	if (ret < 0) {
		log_error("serving %s failed: %s", fs->opts->mountpoint, strerror(-ret));
		return 1;
	}
	return 0; /* unmounted, or a signal asked us to stop */
}

int pagefs_serve(const struct pagefs_mount_opts *o,
                 void (*ready)(void *arg, int err, const char *msg), void *arg)
{
	struct fs_mount fs;
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	char msg[PATH_MAX + 512];
	char *canon = NULL;
	int stuck = 0, status = 1;
	pid_t watchdog = 0;
	int ret;

	memset(&fs, 0, sizeof(fs));
	fs.opts = o;
	fs.timeout = o->entry_timeout;
	fs.uid = getuid();
	fs.gid = getgid();
	fs.pid = getpid();
	clock_gettime(CLOCK_REALTIME, &fs.mounted);

	ret = fs_handles_init(&fs.handles);
	if (ret < 0) {
		ready(arg, ret, "cannot initialize pagefs: out of resources");
		return 1;
	}
	ret = fs_pins_init(&fs.pins);
	if (ret < 0) {
		fs_handles_destroy(&fs.handles);
		ready(arg, ret, "cannot initialize pagefs: out of resources");
		return 1;
	}
	ret = fs_inval_new(&fs.inval);
	if (ret < 0) {
		ready(arg, ret, "cannot initialize pagefs: out of memory");
		goto out_handles;
	}
	msg[0] = '\0';
	ret = meta_open(&o->meta, &fs.meta, msg, sizeof(msg));
	if (ret < 0) {
		ready(arg, ret, msg[0] ? msg : strerror(-ret));
		goto out_inval;
	}
	meta_set_drop_cb(fs.meta, fs_inval_on_drop, fs.inval);
	meta_set_dir_cb(fs.meta, fs_inval_on_dir, fs.inval);
	if (o->on_meta && (ret = o->on_meta(o->hook_arg, fs.meta, msg, sizeof(msg))) != 0) {
		ready(arg, ret < 0 ? ret : -EIO, msg);
		meta_close(fs.meta);
		goto out_inval;
	}

	struct statfs bst;
	if (o->meta.backing && statfs(o->meta.backing, &bst) == 0 &&
	    bst.f_type == FUSE_SUPER_MAGIC) {
		fs.backing_fuse = 1;
		log_info("the backing directory %s is a FUSE mount: reads are copied from it, "
		         "not spliced, and page bytes go to it from aligned buffers",
		         o->meta.backing);
	}
	fs.max_read = fs.backing_fuse ? FS_MAX_WRITE : fs_max_read();

	ret = check_mountpoint(o->mountpoint, msg, sizeof(msg));
	if (ret < 0) {
		ready(arg, ret, msg);
		goto out_meta;
	}
	/* Resolved before mounting: afterwards the path leads into us. */
	canon = realpath(o->mountpoint, NULL);
	ret = build_args(o, fs.max_read, &args);
	if (ret == 0) {
		fs.se = fuse_session_new(&args, fs_metrics_ops(&pagefs_ops), sizeof(pagefs_ops),
		                         &fs);
		if (!fs.se)
			ret = -EINVAL;
	}
	if (ret < 0) {
		ready(arg, ret, "cannot start a FUSE session (see the fuse message above)");
		goto out_meta;
	}
	if (fuse_set_signal_handlers(fs.se) != 0) {
		ready(arg, -EIO, "cannot install signal handlers");
		goto out_session;
	}
	log_reopen_on_sighup(); /* SIGHUP: logrotate, not an unmount */
	if (fuse_session_mount(fs.se, o->mountpoint) != 0) {
		snprintf(msg, sizeof(msg),
		         "cannot mount on %s: is /dev/fuse available and fusermount3 installed, "
		         "and is %s not mounted already?%s",
		         o->mountpoint, o->mountpoint,
		         o->allow_other ? " (-o allow_other needs user_allow_other in "
		                          "/etc/fuse.conf unless run as root)"
		                        : "");
		ready(arg, -EIO, msg);
		goto out_signals;
	}
	fs_recv_install(fs.se); /* page writes arrive aligned (fs_recv.h) */
	watchdog = fs_watch_start(canon ? canon : o->mountpoint);
	ret = fs_inval_start(fs.inval, fs.se, canon ? canon : o->mountpoint);
	if (ret < 0) {
		ready(arg, ret, "cannot start the invalidation thread");
		goto out_unmount;
	}
	char meta_name[1024] = "default";
	if (o->meta.uri)
		meta_uri_display(o->meta.uri, meta_name, sizeof(meta_name));
	log_info("serving %s (index %s) on %s", o->meta.backing ? o->meta.backing : "?", meta_name,
	         o->mountpoint);
	fs_metrics_phase(FS_PHASE_SERVING);
	ready(arg, 0, NULL);

	status = serve(&fs);
	fs_metrics_phase(FS_PHASE_STOPPING);
	stuck = fs_inval_stop(fs.inval) < 0;
	log_info("unmounting %s", o->mountpoint);
out_unmount:
	fs_watch_stop(watchdog);
	fuse_session_unmount(fs.se);
out_signals:
	fuse_remove_signal_handlers(fs.se);
out_session:
	if (!stuck)
		fuse_session_destroy(fs.se);
out_meta:
	close_all_handles(&fs);
	fs_pins_close_all(&fs.pins, fs.meta);
	if (o->on_close)
		o->on_close(o->hook_arg);
	meta_close(fs.meta);
out_inval:
	if (!stuck)
		fs_inval_free(fs.inval);
out_handles:
	fs_pins_destroy(&fs.pins);
	fs_handles_destroy(&fs.handles);
	fuse_opt_free_args(&args);
	free(canon);
	return status;
}
