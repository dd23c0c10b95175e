/*
 * fs.h - the pagefs FUSE filesystem: what tools/ calls to serve a mount.
 *
 * fs/ turns meta/ answers into FUSE replies and moves page bytes between
 * the kernel and the pools' data files. It owns no index state of its own
 * beyond open file handles.
 */
#ifndef PAGEFS_FS_H
#define PAGEFS_FS_H

#include "meta/meta.h"

#include <sys/types.h>

/* Whether readers of a page go through the kernel's page cache (fs_file.c). */
enum pagefs_kernel_cache {
	PAGEFS_CACHE_NEVER,  /* every read is a request (direct I/O; default) */
	PAGEFS_CACHE_REREAD, /* from a page's second open on */
	PAGEFS_CACHE_ALWAYS, /* from the first open */
};

struct pagefs_mount_opts {
	struct meta_config meta; /* index, backing, defaults, policies */
	const char *mountpoint;
	int threads;          /* max FUSE worker threads (0: default) */
	int allow_other;      /* -o allow_other (adds default_permissions) */
	int read_only;        /* -o ro */
	int debug;            /* FUSE protocol debug output */
	double entry_timeout; /* seconds the kernel may cache names/attrs */
	enum pagefs_kernel_cache kernel_cache;
	/* Optional front ends over the same index (e.g. the HTTP protocol):
	 * on_meta runs once the index is open, before the mount (non-zero
	 * fails the mount with msg); on_close runs before the index closes. */
	int (*on_meta)(void *arg, struct meta *m, char *msg, size_t msglen);
	void (*on_close)(void *arg);
	void *hook_arg;
};

/*
 * Opens the index, mounts, and serves requests until the filesystem is
 * unmounted or a SIGTERM/SIGINT arrives (SIGHUP reopens the log file). `ready` is called exactly
 * once: with err 0 once the mount is in place, or with a negative errno and
 * a message naming the fix if setup failed (then pagefs_serve returns 1).
 * Returns 0 after a clean unmount, 1 on failure.
 */
int pagefs_serve(const struct pagefs_mount_opts *o,
                 void (*ready)(void *arg, int err, const char *msg), void *arg);

/* The largest write request the kernel may send a pagefs daemon, and
 * the largest read when reads are spliced (fs_main.c: what a pipe can
 * splice, from /proc/sys/fs/pipe-max-size; on a FUSE backing, where reads
 * are copied, it is FS_MAX_WRITE). */
#define FS_MAX_WRITE (1U << 20)
unsigned fs_max_read(void);

/* fs_watch.c. The FUSE connection number of the mount at mp (a canonical
 * path), read from /proc/self/mountinfo so that nothing under mp is
 * touched: 0, -ENOENT (no FUSE mount there) or -EPERM (not pagefs's). */
int fs_fuse_conn(const char *mp, unsigned *conn);
/* Aborts FUSE connection conn through fusectl (mounted if need be). */
int fs_fuse_abort(unsigned conn);
/* Starts the watchdog that aborts the mount's connection if this daemon
 * is killed (call from the thread that serves; fs_watch_stop before a
 * clean unmount). Its pid, or 0 when it could not start (logged). */
pid_t fs_watch_start(const char *mountpoint);
void fs_watch_stop(pid_t pid);

#endif
