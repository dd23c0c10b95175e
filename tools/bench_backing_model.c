/*
 * bench_backing_model.c - pagefs-backing-model: a FUSE stand-in for a
 * backing shaped like 3FS, run by `pagefs bench --backing-model 3fs`.
 *
 *   pagefs-backing-model [--meta-latency-us N] [--data-latency-us N]
 *                        [--dir-timeout S] [--file-timeout S]
 *                        [--negative-timeout S] [--counters FILE]
 *                        [--threads N] SOURCE MOUNTPOINT
 *
 * It passes every request through to the directory SOURCE (a tmpfs in the
 * bench), but metadata requests (lookup, create, mkdir, open, rename,
 * unlink, rmdir, setattr, readdir) first wait the metadata latency and data
 * requests (read, write) the data latency: on 3FS a metadata operation is
 * a FoundationDB transaction and a read or write crosses the network to a
 * storage target. Everything else (getattr, flush, release, fsync, forget,
 * statfs) is served at once. The wait is a sleep in the request's own
 * worker thread, as a client waits for a remote transaction, and the
 * session is multi-threaded, so waits of unrelated requests overlap.
 * Files are opened direct_io (no data kept in this kernel's cache). How
 * long the kernel may keep an entry and its attributes is set apart for
 * directories and files, and for names that do not exist (0: not kept,
 * every path walk asks): 3FS's FUSE client keeps entries and attributes
 * 30 s and missing names 5 s; the bench's default keeps directories only,
 * as a node sees pages that other nodes write and evict.
 *
 * Inodes follow libfuse's passthrough_ll example (3.14): a node per source
 * inode holding an O_PATH descriptor, found by (st_dev, st_ino) in a hash
 * table, freed when the kernel forgets its last lookup. The FUSE inode
 * number is the node's address; a generation counter keeps a reused
 * address from naming the old inode.
 *
 * With --counters FILE (MODEL_OP_COUNT uint64_t, bench_model.h), every
 * request increments its kind's counter there, for the bench to read.
 * SIGTERM/SIGINT/SIGHUP unmount and exit, and so does the death of the
 * parent process (the bench), so the mount never outlives it.
 */
#include "tools/bench_model.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <getopt.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#define BUCKETS 4096
#define DEFAULT_LATENCY_US 1000
#define DEFAULT_THREADS 64

struct node {
	struct node *next; /* hash chain; under model.lock */
	dev_t dev;
	ino_t ino;
	uint64_t gen;
	int fd;           /* O_PATH descriptor of the source inode */
	uint64_t nlookup; /* the kernel's lookups; under model.lock */
};

struct dir_handle {
	DIR *dp;
	struct dirent *entry; /* read but not yet replied */
	off_t offset;         /* the cookie after entry */
};

static struct {
	pthread_mutex_t lock; /* the hash table and every nlookup */
	struct node root;
	struct node *table[BUCKETS];
	uint64_t next_gen; /* under lock */
	uint64_t meta_ns, data_ns;
	double dir_timeout, file_timeout, negative_timeout; /* seconds */
	_Atomic uint64_t *counts;                           /* shared counter file, or NULL */
} model = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Counts a request of kind op and waits the latency it is charged. */
static void charge(enum model_op op)
{
	struct timespec end;
	uint64_t ns;
	int waits = MODEL_OP_WAITS(op);

	if (model.counts)
		atomic_fetch_add_explicit(&model.counts[op], 1, memory_order_relaxed);
	ns = waits == 1 ? model.meta_ns : waits == 2 ? model.data_ns : 0;
	if (!ns)
		return;
	clock_gettime(CLOCK_MONOTONIC, &end);
	end.tv_sec += (time_t)(ns / 1000000000ULL);
	end.tv_nsec += (long)(ns % 1000000000ULL);
	if (end.tv_nsec >= 1000000000L) {
		end.tv_sec++;
		end.tv_nsec -= 1000000000L;
	}
	while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &end, NULL) == EINTR)
		;
}

static struct node *node_of(fuse_ino_t ino)
{
	/* the inode number is the node's address (passthrough_ll's way) */
	return ino == FUSE_ROOT_ID
	               ? &model.root
	               : (struct node *)(uintptr_t)ino; // NOLINT(performance-no-int-to-ptr)
}

static size_t bucket(dev_t dev, ino_t ino)
{
	uint64_t h = ((uint64_t)ino * 0x9E3779B97F4A7C15ULL) ^ (uint64_t)dev;

	return (size_t)(h >> 52) % BUCKETS;
}

/* How long the kernel may keep an entry of this type and its attributes. */
static double timeout_of(const struct stat *st)
{
	return S_ISDIR(st->st_mode) ? model.dir_timeout : model.file_timeout;
}

static void proc_path(int fd, char *buf, size_t len)
{
	snprintf(buf, len, "/proc/self/fd/%d", fd);
}

/* Finds or makes the node of name in parent and counts one lookup. 0 and
 * *e filled, or an errno. No wait: the caller charged its request. */
static int do_lookup(fuse_ino_t parent, const char *name, struct fuse_entry_param *e)
{
	struct node *p = node_of(parent), *n;
	int fd, err;
	size_t b;

	memset(e, 0, sizeof(*e));
	fd = openat(p->fd, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		return errno;
	if (fstatat(fd, "", &e->attr, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0) {
		err = errno;
		close(fd);
		return err;
	}
	b = bucket(e->attr.st_dev, e->attr.st_ino);
	pthread_mutex_lock(&model.lock);
	for (n = model.table[b]; n; n = n->next)
		if (n->dev == e->attr.st_dev && n->ino == e->attr.st_ino)
			break;
	if (n) {
		close(fd); /* known: keep the first descriptor */
	} else if ((n = calloc(1, sizeof(*n)))) {
		n->dev = e->attr.st_dev;
		n->ino = e->attr.st_ino;
		n->fd = fd;
		n->gen = ++model.next_gen;
		n->next = model.table[b];
		model.table[b] = n;
	} else {
		pthread_mutex_unlock(&model.lock);
		close(fd);
		return ENOMEM;
	}
	n->nlookup++;
	e->ino = (fuse_ino_t)(uintptr_t)n;
	e->generation = n->gen;
	e->entry_timeout = e->attr_timeout = timeout_of(&e->attr);
	pthread_mutex_unlock(&model.lock);
	return 0;
}

static void forget_one(fuse_ino_t ino, uint64_t nlookup)
{
	struct node *n = node_of(ino), **pp;

	if (n == &model.root)
		return;
	pthread_mutex_lock(&model.lock);
	n->nlookup -= nlookup < n->nlookup ? nlookup : n->nlookup;
	if (n->nlookup == 0) {
		for (pp = &model.table[bucket(n->dev, n->ino)]; *pp; pp = &(*pp)->next)
			if (*pp == n) {
				*pp = n->next;
				break;
			}
		close(n->fd);
		free(n);
	}
	pthread_mutex_unlock(&model.lock);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct fuse_entry_param e;
	int err;

	charge(MODEL_LOOKUP);
	err = do_lookup(parent, name, &e);
	if (err == ENOENT && model.negative_timeout > 0) {
		memset(&e, 0, sizeof(e)); /* ino 0: the kernel keeps the miss */
		e.entry_timeout = model.negative_timeout;
		return (void)fuse_reply_entry(req, &e);
	}
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_entry(req, &e);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	charge(MODEL_FORGET);
	forget_one(ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	charge(MODEL_FORGET);
	for (size_t i = 0; i < count; i++)
		forget_one(forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void reply_attr(fuse_req_t req, fuse_ino_t ino)
{
	struct stat st;

	if (fstatat(node_of(ino)->fd, "", &st, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW) < 0)
		return (void)fuse_reply_err(req, errno);
	fuse_reply_attr(req, &st, timeout_of(&st));
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)fi;
	charge(MODEL_GETATTR);
	reply_attr(req, ino);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int valid,
                       struct fuse_file_info *fi)
{
	struct node *n = node_of(ino);
	char path[64];
	int ret = 0;

	charge(MODEL_SETATTR);
	proc_path(n->fd, path, sizeof(path));
	if (valid & FUSE_SET_ATTR_MODE)
		ret = fi ? fchmod((int)fi->fh, attr->st_mode) : chmod(path, attr->st_mode);
	if (!ret && (valid & (FUSE_SET_ATTR_UID | FUSE_SET_ATTR_GID)))
		ret = fchownat(n->fd, "", valid & FUSE_SET_ATTR_UID ? attr->st_uid : (uid_t)-1,
		               valid & FUSE_SET_ATTR_GID ? attr->st_gid : (gid_t)-1,
		               AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW);
	if (!ret && (valid & FUSE_SET_ATTR_SIZE))
		ret = fi ? ftruncate((int)fi->fh, attr->st_size) : truncate(path, attr->st_size);
	if (!ret && (valid & (FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME))) {
		struct timespec tv[2] = {{0, UTIME_OMIT}, {0, UTIME_OMIT}};
		if (valid & FUSE_SET_ATTR_ATIME_NOW)
			tv[0].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_ATIME)
			tv[0] = attr->st_atim;
		if (valid & FUSE_SET_ATTR_MTIME_NOW)
			tv[1].tv_nsec = UTIME_NOW;
		else if (valid & FUSE_SET_ATTR_MTIME)
			tv[1] = attr->st_mtim;
		ret = fi ? futimens((int)fi->fh, tv) : utimensat(AT_FDCWD, path, tv, 0);
	}
	if (ret < 0)
		return (void)fuse_reply_err(req, errno);
	reply_attr(req, ino);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct fuse_entry_param e;
	int err;

	charge(MODEL_MKDIR);
	if (mkdirat(node_of(parent)->fd, name, mode) < 0)
		return (void)fuse_reply_err(req, errno);
	err = do_lookup(parent, name, &e);
	if (err)
		return (void)fuse_reply_err(req, err);
	fuse_reply_entry(req, &e);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	charge(MODEL_UNLINK);
	fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, 0) < 0 ? errno : 0);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	charge(MODEL_RMDIR);
	fuse_reply_err(req, unlinkat(node_of(parent)->fd, name, AT_REMOVEDIR) < 0 ? errno : 0);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
	charge(MODEL_RENAME);
	if (renameat2(node_of(parent)->fd, name, node_of(newparent)->fd, newname, flags) < 0)
		return (void)fuse_reply_err(req, errno);
	fuse_reply_err(req, 0);
}

static void op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                      struct fuse_file_info *fi)
{
	struct fuse_entry_param e;
	int fd, err;

	charge(MODEL_CREATE);
	fd = openat(node_of(parent)->fd, name, (fi->flags | O_CREAT | O_CLOEXEC) & ~O_NOFOLLOW,
	            mode);
	if (fd < 0)
		return (void)fuse_reply_err(req, errno);
	err = do_lookup(parent, name, &e);
	if (err) {
		close(fd);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)fd;
	fi->direct_io = 1;
	if (fuse_reply_create(req, &e, fi) != 0) { /* interrupted: the kernel forgets it */
		close(fd);
		forget_one(e.ino, 1);
	}
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	char path[64];
	int fd;

	charge(MODEL_OPEN);
	proc_path(node_of(ino)->fd, path, sizeof(path));
	fd = open(path, (fi->flags | O_CLOEXEC) & ~O_NOFOLLOW);
	if (fd < 0)
		return (void)fuse_reply_err(req, errno);
	fi->fh = (uint64_t)fd;
	fi->direct_io = 1;
	if (fuse_reply_open(req, fi) != 0)
		close(fd);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	(void)ino;
	charge(MODEL_RELEASE);
	close((int)fi->fh);
	fuse_reply_err(req, 0);
}

static void op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int fd;

	(void)ino;
	charge(MODEL_FLUSH);
	fd = dup((int)fi->fh); /* close(dup): what close() of the file would report */
	fuse_reply_err(req, fd < 0 || close(fd) < 0 ? errno : 0);
}

static void op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	int ret;

	(void)ino;
	charge(MODEL_FSYNC);
	ret = datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh);
	fuse_reply_err(req, ret < 0 ? errno : 0);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
	struct fuse_bufvec buf = FUSE_BUFVEC_INIT(size);

	(void)ino;
	charge(MODEL_READ);
	buf.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	buf.buf[0].fd = (int)fi->fh;
	buf.buf[0].pos = off;
	fuse_reply_data(req, &buf, FUSE_BUF_SPLICE_MOVE);
}

static void op_write_buf(fuse_req_t req, fuse_ino_t ino, struct fuse_bufvec *in, off_t off,
                         struct fuse_file_info *fi)
{
	struct fuse_bufvec out = FUSE_BUFVEC_INIT(fuse_buf_size(in));
	ssize_t n;

	(void)ino;
	charge(MODEL_WRITE);
	out.buf[0].flags = FUSE_BUF_IS_FD | FUSE_BUF_FD_SEEK;
	out.buf[0].fd = (int)fi->fh;
	out.buf[0].pos = off;
	n = fuse_buf_copy(&out, in, 0);
	if (n < 0)
		return (void)fuse_reply_err(req, (int)-n);
	fuse_reply_write(req, (size_t)n);
}

static void op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
                         struct fuse_file_info *fi)
{
	(void)ino;
	charge(MODEL_OTHER);
	fuse_reply_err(req, fallocate((int)fi->fh, mode, off, len) < 0 ? errno : 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct statvfs sv;

	charge(MODEL_OTHER);
	if (fstatvfs(node_of(ino)->fd, &sv) < 0)
		return (void)fuse_reply_err(req, errno);
	fuse_reply_statfs(req, &sv);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir_handle *d = calloc(1, sizeof(*d));
	int fd, err;

	charge(MODEL_OPENDIR);
	if (!d)
		return (void)fuse_reply_err(req, ENOMEM);
	fd = openat(node_of(ino)->fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !(d->dp = fdopendir(fd))) {
		err = errno;
		if (fd >= 0)
			close(fd);
		free(d);
		return (void)fuse_reply_err(req, err);
	}
	fi->fh = (uint64_t)(uintptr_t)d;
	if (fuse_reply_open(req, fi) != 0) {
		closedir(d->dp);
		free(d);
	}
}

static struct dir_handle *dir_of(const struct fuse_file_info *fi)
{
	return (struct dir_handle *)(uintptr_t)fi->fh; // NOLINT(performance-no-int-to-ptr)
}

/* One buffer of entries from offset on; the cookie of an entry is the
 * telldir position after it. */
static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t offset,
                       struct fuse_file_info *fi)
{
	struct dir_handle *d = dir_of(fi);
	char *buf = malloc(size);
	size_t used = 0;

	(void)ino;
	charge(MODEL_READDIR);
	if (!buf)
		return (void)fuse_reply_err(req, ENOMEM);
	if (offset != d->offset) {
		seekdir(d->dp, offset);
		d->entry = NULL;
		d->offset = offset;
	}
	for (;;) {
		struct stat st;
		size_t len;

		if (!d->entry) {
			errno = 0;
			d->entry = readdir(d->dp);
			if (!d->entry) {
				if (errno && used == 0) {
					free(buf);
					return (void)fuse_reply_err(req, errno);
				}
				break;
			}
		}
		memset(&st, 0, sizeof(st));
		st.st_ino = d->entry->d_ino;
		st.st_mode = (mode_t)d->entry->d_type << 12;
		off_t next = telldir(d->dp);
		len = fuse_add_direntry(req, buf + used, size - used, d->entry->d_name, &st, next);
		if (len > size - used)
			break; /* the entry waits for the next call */
		used += len;
		d->entry = NULL;
		d->offset = next;
	}
	fuse_reply_buf(req, buf, used);
	free(buf);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct dir_handle *d = dir_of(fi);

	(void)ino;
	charge(MODEL_RELEASEDIR);
	closedir(d->dp);
	free(d);
	fuse_reply_err(req, 0);
}

/* Lookups and readdirs of one directory run in parallel (without this
 * the kernel serializes them on the directory, and a slow lookup holds
 * up every other name there); the page cache stays out of the way. */
static void op_init(void *data, struct fuse_conn_info *conn)
{
	(void)data;
	if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
		conn->want |= FUSE_CAP_PARALLEL_DIROPS;
	conn->want &= ~(unsigned)FUSE_CAP_WRITEBACK_CACHE;
}

/* Unmount leaves nodes the kernel never forgot: free them all. */
static void op_destroy(void *data)
{
	(void)data;
	pthread_mutex_lock(&model.lock);
	for (size_t b = 0; b < BUCKETS; b++) {
		while (model.table[b]) {
			struct node *n = model.table[b];
			model.table[b] = n->next;
			close(n->fd);
			free(n);
		}
	}
	pthread_mutex_unlock(&model.lock);
}

static const struct fuse_lowlevel_ops ops = {
	.init = op_init,
	.destroy = op_destroy,
	.lookup = op_lookup,
	.forget = op_forget,
	.forget_multi = op_forget_multi,
	.getattr = op_getattr,
	.setattr = op_setattr,
	.mkdir = op_mkdir,
	.unlink = op_unlink,
	.rmdir = op_rmdir,
	.rename = op_rename,
	.create = op_create,
	.open = op_open,
	.release = op_release,
	.flush = op_flush,
	.fsync = op_fsync,
	.read = op_read,
	.write_buf = op_write_buf,
	.fallocate = op_fallocate,
	.statfs = op_statfs,
	.opendir = op_opendir,
	.readdir = op_readdir,
	.releasedir = op_releasedir,
};

static void usage(FILE *out)
{
	fprintf(out,
	        "Usage: " MODEL_BIN " [--meta-latency-us N] [--data-latency-us N]\n"
	        "       [--dir-timeout S] [--file-timeout S] [--negative-timeout S]\n"
	        "       [--counters FILE] [--threads N] SOURCE MOUNTPOINT\n"
	        "Serves SOURCE at MOUNTPOINT; metadata requests wait N us (default %d),\n"
	        "reads and writes N us (default %d); the kernel keeps entries and\n"
	        "attributes of directories and files, and missing names, S seconds\n"
	        "(default 0). Run by `pagefs bench --backing-model`.\n",
	        DEFAULT_LATENCY_US, DEFAULT_LATENCY_US);
}

static int parse_count(const char *s, long max, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(s, &end, 10);
	return errno || end == s || *end || *out < 0 || *out > max ? -1 : 0;
}

/* Maps the counter file; 0 or -1 (printed). */
static int map_counters(const char *path)
{
	size_t len = MODEL_OP_COUNT * sizeof(uint64_t);
	int fd = open(path, O_RDWR | O_CLOEXEC);
	void *p;

	if (fd < 0 || ftruncate(fd, (off_t)len) < 0) {
		fprintf(stderr, MODEL_BIN ": cannot open counters %s: %s\n", path, strerror(errno));
		if (fd >= 0)
			close(fd);
		return -1;
	}
	p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	close(fd);
	if (p == MAP_FAILED) {
		fprintf(stderr, MODEL_BIN ": cannot map counters %s: %s\n", path, strerror(errno));
		return -1;
	}
	model.counts = p;
	return 0;
}

static int serve(const char *source, const char *mnt, long threads)
{
	struct fuse_args args = FUSE_ARGS_INIT(0, NULL);
	struct fuse_loop_config *cfg = NULL;
	struct fuse_session *se;
	int ret = 1;

	model.root.fd = open(source, O_PATH | O_DIRECTORY | O_CLOEXEC);
	if (model.root.fd < 0) {
		fprintf(stderr, MODEL_BIN ": cannot open %s: %s\n", source, strerror(errno));
		return 1;
	}
	model.root.nlookup = 2; /* never forgotten */
	if (fuse_opt_add_arg(&args, MODEL_BIN) || fuse_opt_add_arg(&args, "-o") ||
	    fuse_opt_add_arg(&args, "fsname=3fs-model,subtype=3fs-model"))
		goto out_root;
	se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
	if (!se)
		goto out_root;
	if (fuse_set_signal_handlers(se) != 0)
		goto out_session;
	if (fuse_session_mount(se, mnt) != 0)
		goto out_signals;
	cfg = fuse_loop_cfg_create();
	if (cfg) {
		fuse_loop_cfg_set_max_threads(cfg, (unsigned)threads);
		fuse_loop_cfg_set_clone_fd(cfg, 0);
		ret = fuse_session_loop_mt(se, cfg) < 0;
		fuse_loop_cfg_destroy(cfg);
	}
	fuse_session_unmount(se);
out_signals:
	fuse_remove_signal_handlers(se);
out_session:
	fuse_session_destroy(se);
out_root:
	fuse_opt_free_args(&args);
	close(model.root.fd);
	return ret;
}

int main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"meta-latency-us", required_argument, NULL, 'm'},
		{"data-latency-us", required_argument, NULL, 'd'},
		{"counters", required_argument, NULL, 'c'},
		{"threads", required_argument, NULL, 't'},
		{"dir-timeout", required_argument, NULL, 'D'},
		{"file-timeout", required_argument, NULL, 'F'},
		{"negative-timeout", required_argument, NULL, 'N'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	long meta = DEFAULT_LATENCY_US, data = DEFAULT_LATENCY_US, threads = DEFAULT_THREADS, v;
	const char *counters = NULL;
	int c;

	while ((c = getopt_long(argc, argv, "m:d:c:t:D:F:N:h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
		case 'd':
			if (parse_count(optarg, 10000000L, &v) < 0) {
				fprintf(stderr,
				        MODEL_BIN ": '%s' is not a latency in us (0..10000000)\n",
				        optarg);
				return 2;
			}
			*(c == 'm' ? &meta : &data) = v;
			break;
		case 'c':
			counters = optarg;
			break;
		case 't':
			if (parse_count(optarg, 1024, &threads) < 0 || threads < 1) {
				fprintf(stderr,
				        MODEL_BIN ": '%s' is not a thread count in 1..1024\n",
				        optarg);
				return 2;
			}
			break;
		case 'D':
		case 'F':
		case 'N': {
			char *end;
			double t = strtod(optarg, &end);
			if (end == optarg || *end || !(t >= 0 && t <= 86400)) {
				fprintf(stderr,
				        MODEL_BIN ": '%s' is not a timeout in s (0..86400)\n",
				        optarg);
				return 2;
			}
			*(c == 'D'   ? &model.dir_timeout
			  : c == 'F' ? &model.file_timeout
			             : &model.negative_timeout) = t;
			break;
		}
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (argc - optind != 2) {
		usage(stderr);
		return 2;
	}
	/* The bench may die without cleaning up: go with it. */
	prctl(PR_SET_PDEATHSIG, SIGTERM);
	if (getppid() == 1)
		return 1; /* it died before prctl */
	model.meta_ns = (uint64_t)meta * 1000;
	model.data_ns = (uint64_t)data * 1000;
	if (counters && map_counters(counters) < 0)
		return 1;
	return serve(argv[optind], argv[optind + 1], threads);
}
