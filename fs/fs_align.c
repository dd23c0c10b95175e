/*
 * fs_align.c - the per-thread aligned buffers of fs_align.h.
 *
 * One buffer per libfuse worker thread, kept for the thread's life: a
 * fresh 1 MiB allocation per request would be mapped anew and fault in
 * 256 pages each time, which costs more than the copy it serves. A writer
 * that holds a write's bytes back (fs_write.c) takes its thread's buffer
 * over and gives it back later, into a small pool the next thread without
 * one draws from, for the same reason.
 */
#include "fs/fs_align.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "fs/fs.h"

static pthread_key_t buf_key;
static pthread_once_t buf_once = PTHREAD_ONCE_INIT;
static int buf_key_ok;

/* Buffers given back, for threads without one. */
#define POOL_MAX 16
static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static void *pool[POOL_MAX]; /* protected by pool_lock */
static int npool;            /* protected by pool_lock */
static _Atomic int ntaken;   /* taken and not given back */

static void make_key(void)
{
	buf_key_ok = pthread_key_create(&buf_key, free) == 0;
}

static size_t requests(size_t pages)
{
	return (pages + FS_BACKING_MAX_PAGES - 1) / FS_BACKING_MAX_PAGES;
}

int fs_align_helps(const void *buf, size_t size)
{
	size_t lead = (uintptr_t)buf % FS_ALIGN;
	size_t spanned = (lead + size + FS_ALIGN - 1) / FS_ALIGN;
	size_t aligned = (size + FS_ALIGN - 1) / FS_ALIGN;

	return size <= FS_MAX_WRITE && requests(spanned) > requests(aligned);
}

void *fs_align_buf(void)
{
	void *buf;

	pthread_once(&buf_once, make_key);
	if (!buf_key_ok)
		return NULL;
	buf = pthread_getspecific(buf_key);
	if (buf)
		return buf;
	pthread_mutex_lock(&pool_lock);
	if (npool > 0)
		buf = pool[--npool];
	pthread_mutex_unlock(&pool_lock);
	if (!buf && posix_memalign(&buf, FS_ALIGN, FS_ALIGN_BUF_SIZE) != 0)
		return NULL;
	if (pthread_setspecific(buf_key, buf) != 0) {
		free(buf);
		return NULL;
	}
	return buf;
}

void *fs_align_take(const void *buf)
{
	pthread_once(&buf_once, make_key);
	if (!buf_key_ok || !buf || pthread_getspecific(buf_key) != buf)
		return NULL;
	if (atomic_fetch_add(&ntaken, 1) >= FS_ALIGN_TAKEN_MAX) {
		atomic_fetch_sub(&ntaken, 1);
		return NULL;
	}
	if (pthread_setspecific(buf_key, NULL) != 0) {
		atomic_fetch_sub(&ntaken, 1);
		return NULL;
	}
	return (void *)buf; // NOLINT: the buffer is ours to hand over
}

void fs_align_give(void *buf)
{
	if (!buf)
		return;
	atomic_fetch_sub(&ntaken, 1);
	pthread_mutex_lock(&pool_lock);
	if (npool < POOL_MAX) {
		pool[npool++] = buf;
		buf = NULL;
	}
	pthread_mutex_unlock(&pool_lock);
	free(buf);
}
