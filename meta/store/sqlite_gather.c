/*
 * sqlite_gather.c - an SQLite VFS over the default one ("unix") that
 * gathers a transaction's writes to the WAL into one write(2).
 *
 * SQLite appends a commit to the WAL as two writes a frame, its 24-byte
 * header and then the page: a confirm of 128 keys is four frames, eight
 * pwrite(2)s, each a page cache lookup and a partial copy in the kernel.
 * One pwrite of the same bytes costs a quarter of the eight here
 * (build/wal_writes: 3.8-4.0 against 15.2-15.5 us of CPU a commit).
 * This VFS keeps contiguous WAL writes in a buffer and writes them out:
 *   - when the page of a commit frame (a frame header whose "database
 *     size after commit" field is not 0) has been added: the commit's
 *     write then fails or succeeds inside SQLite's own COMMIT, as before;
 *   - before anything that must see the file as SQLite wrote it: a read,
 *     a write elsewhere in the file, truncate, sync, size, close, a file
 *     control, a mapping;
 *   - when the buffer is full, and when the store asks after a COMMIT
 *     (store_gather_flush: a commit frame this file did not recognise
 *     still reaches the kernel before the commit is reported).
 * So when COMMIT returns, the transaction's frames are in the kernel as
 * they were without this VFS: --durability process keeps its meaning
 * (synchronous=OFF), and power (FULL) syncs after a write-out.
 *
 * A failed write-out drops what it held: those frames belong to a
 * transaction that fails (SQLite's COMMIT gets the error, or the store's
 * flush does and fails the batch), and SQLite never reads frames of a
 * transaction that did not commit.
 *
 * Files other than the WAL are the default VFS's own, untouched. Callers:
 * the store's one connection, under its db_lock; nothing here is shared
 * between files but the registration and a counter.
 */
#include "meta/store/sqlite_gather.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define GATHER_NAME "pagefs-gather"
/* A buffer holds up to this much before it is written out: a confirm's
 * frames fit many times over. Not more: SQLite's unix VFS writes at most
 * 128 KiB - 1 bytes a call (seekAndWriteFd masks the length with 0x1ffff,
 * and answers SQLITE_FULL for the rest). */
#define GATHER_CAP ((1 << 17) - 1)
/* SQLite's WAL header, and each frame's header (sqlite3 wal.c). */
#define WAL_HDR 32
#define FRAME_HDR 24

struct gfile {
	sqlite3_file base;    /* pMethods: &gather_io */
	sqlite3_file *real;   /* the default VFS's file, right after this */
	unsigned char *buf;   /* gathered bytes */
	size_t len;           /* used bytes of buf (GATHER_CAP allocated) */
	sqlite3_int64 at;     /* file offset of buf[0] */
	int commit_page_next; /* the last write was a commit frame's header */
};

static sqlite3_vfs gather_vfs;
static sqlite3_vfs *base_vfs;
static _Atomic uint64_t writes;
static pthread_once_t once = PTHREAD_ONCE_INIT;
static int registered;

static struct gfile *gf(sqlite3_file *f)
{
	return (struct gfile *)f;
}

/* Writes buf out; empties it whatever happens (above: why). */
static int flush(struct gfile *g)
{
	int rc = SQLITE_OK;

	if (g->len) {
		rc = g->real->pMethods->xWrite(g->real, g->buf, (int)g->len, g->at);
		atomic_fetch_add_explicit(&writes, 1, memory_order_relaxed);
	}
	g->len = 0;
	g->commit_page_next = 0;
	return rc;
}

/* A frame header marks a commit when its bytes 4-7 (the database's size
 * in pages after the commit, big-endian) are not all 0. */
static int commit_header(const void *p, int amt, sqlite3_int64 off)
{
	const unsigned char *h = p;

	return amt == FRAME_HDR && off >= WAL_HDR && (h[4] | h[5] | h[6] | h[7]) != 0;
}

static int g_write(sqlite3_file *f, const void *p, int amt, sqlite3_int64 off)
{
	struct gfile *g = gf(f);
	int rc = SQLITE_OK, commit_page = g->commit_page_next;

	if (g->len && (off != g->at + (sqlite3_int64)g->len || g->len + (size_t)amt > GATHER_CAP))
		rc = flush(g);
	if (rc != SQLITE_OK)
		return rc;
	if ((size_t)amt > GATHER_CAP) /* (not a frame: straight through) */
		return g->real->pMethods->xWrite(g->real, p, amt, off);
	if (!g->buf && !(g->buf = malloc(GATHER_CAP)))
		return g->real->pMethods->xWrite(g->real, p, amt, off);
	if (!g->len)
		g->at = off;
	memcpy(g->buf + g->len, p, (size_t)amt);
	g->len += (size_t)amt;
	g->commit_page_next = commit_header(p, amt, off);
	return commit_page && amt != FRAME_HDR ? flush(g) : SQLITE_OK;
}

/* Every other call sees the file with the gathered bytes written. */
static int g_close(sqlite3_file *f)
{
	struct gfile *g = gf(f);
	int rc = flush(g), rc2 = g->real->pMethods->xClose(g->real);

	free(g->buf);
	g->buf = NULL;
	return rc != SQLITE_OK ? rc : rc2;
}

#define FLUSHED(g, call)                                                                           \
	do {                                                                                       \
		int rc_ = flush(g);                                                                \
		return rc_ != SQLITE_OK ? rc_ : (call);                                            \
	} while (0)

static int g_read(sqlite3_file *f, void *p, int amt, sqlite3_int64 off)
{
	struct gfile *g = gf(f);
	FLUSHED(g, g->real->pMethods->xRead(g->real, p, amt, off));
}

static int g_truncate(sqlite3_file *f, sqlite3_int64 size)
{
	struct gfile *g = gf(f);
	FLUSHED(g, g->real->pMethods->xTruncate(g->real, size));
}

static int g_sync(sqlite3_file *f, int flags)
{
	struct gfile *g = gf(f);
	FLUSHED(g, g->real->pMethods->xSync(g->real, flags));
}

static int g_size(sqlite3_file *f, sqlite3_int64 *size)
{
	struct gfile *g = gf(f);
	FLUSHED(g, g->real->pMethods->xFileSize(g->real, size));
}

static int g_control(sqlite3_file *f, int op, void *arg)
{
	struct gfile *g = gf(f);
	FLUSHED(g, g->real->pMethods->xFileControl(g->real, op, arg));
}

static int g_fetch(sqlite3_file *f, sqlite3_int64 off, int amt, void **pp)
{
	struct gfile *g = gf(f);
	*pp = NULL;
	FLUSHED(g, g->real->pMethods->iVersion >= 3
	                   ? g->real->pMethods->xFetch(g->real, off, amt, pp)
	                   : SQLITE_OK);
}

static int g_unfetch(sqlite3_file *f, sqlite3_int64 off, void *p)
{
	struct gfile *g = gf(f);
	return g->real->pMethods->iVersion >= 3 ? g->real->pMethods->xUnfetch(g->real, off, p)
	                                        : SQLITE_OK;
}

static int g_lock(sqlite3_file *f, int lock)
{
	return gf(f)->real->pMethods->xLock(gf(f)->real, lock);
}

static int g_unlock(sqlite3_file *f, int lock)
{
	return gf(f)->real->pMethods->xUnlock(gf(f)->real, lock);
}

static int g_reserved(sqlite3_file *f, int *out)
{
	return gf(f)->real->pMethods->xCheckReservedLock(gf(f)->real, out);
}

static int g_sector(sqlite3_file *f)
{
	return gf(f)->real->pMethods->xSectorSize(gf(f)->real);
}

static int g_device(sqlite3_file *f)
{
	return gf(f)->real->pMethods->xDeviceCharacteristics(gf(f)->real);
}

/* (SQLite maps no shared memory for a WAL file; forwarded all the same.) */
static int g_shm_map(sqlite3_file *f, int pg, int pgsz, int extend, void volatile **pp)
{
	const sqlite3_io_methods *m = gf(f)->real->pMethods;
	return m->iVersion >= 2 ? m->xShmMap(gf(f)->real, pg, pgsz, extend, pp) : SQLITE_IOERR;
}

static int g_shm_lock(sqlite3_file *f, int offset, int n, int flags)
{
	const sqlite3_io_methods *m = gf(f)->real->pMethods;
	return m->iVersion >= 2 ? m->xShmLock(gf(f)->real, offset, n, flags) : SQLITE_IOERR;
}

static void g_shm_barrier(sqlite3_file *f)
{
	const sqlite3_io_methods *m = gf(f)->real->pMethods;
	if (m->iVersion >= 2)
		m->xShmBarrier(gf(f)->real);
}

static int g_shm_unmap(sqlite3_file *f, int delete_flag)
{
	const sqlite3_io_methods *m = gf(f)->real->pMethods;
	return m->iVersion >= 2 ? m->xShmUnmap(gf(f)->real, delete_flag) : SQLITE_OK;
}

static const sqlite3_io_methods gather_io = {
	.iVersion = 3,
	.xClose = g_close,
	.xRead = g_read,
	.xWrite = g_write,
	.xTruncate = g_truncate,
	.xSync = g_sync,
	.xFileSize = g_size,
	.xLock = g_lock,
	.xUnlock = g_unlock,
	.xCheckReservedLock = g_reserved,
	.xFileControl = g_control,
	.xSectorSize = g_sector,
	.xDeviceCharacteristics = g_device,
	.xShmMap = g_shm_map,
	.xShmLock = g_shm_lock,
	.xShmBarrier = g_shm_barrier,
	.xShmUnmap = g_shm_unmap,
	.xFetch = g_fetch,
	.xUnfetch = g_unfetch,
};

/* A WAL file gets a buffer in front of the default VFS's file; every
 * other file is the default VFS's file itself (its methods, in the space
 * SQLite allocated for ours, which is larger). */
static int v_open(sqlite3_vfs *vfs, sqlite3_filename name, sqlite3_file *f, int flags,
                  int *out_flags)
{
	(void)vfs;
	if (!(flags & SQLITE_OPEN_WAL))
		return base_vfs->xOpen(base_vfs, name, f, flags, out_flags);
	struct gfile *g = gf(f);
	memset(g, 0, sizeof(*g));
	g->real = (sqlite3_file *)(g + 1);
	int rc = base_vfs->xOpen(base_vfs, name, g->real, flags, out_flags);
	g->base.pMethods = rc == SQLITE_OK ? &gather_io : NULL;
	return rc;
}

/* The rest is the default VFS's, called with its own sqlite3_vfs. */
static int v_delete(sqlite3_vfs *v, const char *name, int sync_dir)
{
	(void)v;
	return base_vfs->xDelete(base_vfs, name, sync_dir);
}

static int v_access(sqlite3_vfs *v, const char *name, int flags, int *out)
{
	(void)v;
	return base_vfs->xAccess(base_vfs, name, flags, out);
}

static int v_full(sqlite3_vfs *v, const char *name, int n, char *out)
{
	(void)v;
	return base_vfs->xFullPathname(base_vfs, name, n, out);
}

static void *v_dlopen(sqlite3_vfs *v, const char *name)
{
	(void)v;
	return base_vfs->xDlOpen(base_vfs, name);
}

static void v_dlerror(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	base_vfs->xDlError(base_vfs, n, out);
}

static void (*v_dlsym(sqlite3_vfs *v, void *h, const char *sym))(void)
{
	(void)v;
	return base_vfs->xDlSym(base_vfs, h, sym);
}

static void v_dlclose(sqlite3_vfs *v, void *h)
{
	(void)v;
	base_vfs->xDlClose(base_vfs, h);
}

static int v_random(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return base_vfs->xRandomness(base_vfs, n, out);
}

static int v_sleep(sqlite3_vfs *v, int us)
{
	(void)v;
	return base_vfs->xSleep(base_vfs, us);
}

static int v_time(sqlite3_vfs *v, double *out)
{
	(void)v;
	return base_vfs->xCurrentTime(base_vfs, out);
}

static int v_error(sqlite3_vfs *v, int n, char *out)
{
	(void)v;
	return base_vfs->xGetLastError ? base_vfs->xGetLastError(base_vfs, n, out) : 0;
}

static int v_time64(sqlite3_vfs *v, sqlite3_int64 *out)
{
	(void)v;
	return base_vfs->xCurrentTimeInt64(base_vfs, out);
}

static void do_register(void)
{
	base_vfs = sqlite3_vfs_find(NULL);
	/* (xCurrentTimeInt64 is version 2's; unix has 3) */
	if (!base_vfs || base_vfs->iVersion < 2)
		return;
	gather_vfs = (sqlite3_vfs){
		.iVersion = 2,
		.szOsFile = (int)sizeof(struct gfile) + base_vfs->szOsFile,
		.mxPathname = base_vfs->mxPathname,
		.zName = GATHER_NAME,
		.xOpen = v_open,
		.xDelete = v_delete,
		.xAccess = v_access,
		.xFullPathname = v_full,
		.xDlOpen = v_dlopen,
		.xDlError = v_dlerror,
		.xDlSym = v_dlsym,
		.xDlClose = v_dlclose,
		.xRandomness = v_random,
		.xSleep = v_sleep,
		.xCurrentTime = v_time,
		.xGetLastError = v_error,
		.xCurrentTimeInt64 = v_time64,
	};
	registered = sqlite3_vfs_register(&gather_vfs, 0) == SQLITE_OK;
}

const char *store_gather_vfs(void)
{
	pthread_once(&once, do_register);
	return registered ? GATHER_NAME : NULL;
}

int store_gather_flush(sqlite3 *db)
{
	sqlite3_file *f = NULL;

	if (sqlite3_file_control(db, "main", SQLITE_FCNTL_JOURNAL_POINTER, &f) != SQLITE_OK || !f ||
	    f->pMethods != &gather_io)
		return SQLITE_OK;
	return flush(gf(f));
}

uint64_t store_gather_writes(void)
{
	return atomic_load_explicit(&writes, memory_order_relaxed);
}
