/*
 * fs_align.h - page-aligned bounce buffers for the bytes a daemon on a
 * FUSE backing (3FS, the bench's passthrough) reads and writes.
 *
 * The kernel sends a direct-I/O pread or pwrite to a FUSE file as requests
 * of at most FS_BACKING_MAX_PAGES memory pages of the caller's buffer. A
 * 1 MiB buffer that starts inside a page spans 257 pages, so it goes as
 * two requests, and on 3FS each one pays a network round trip (about
 * 1 ms). libfuse hands a write's bytes at a header offset inside its
 * request buffer, and malloc'd buffers of that size start 16 bytes into a
 * page, so both sides of the daemon's backing I/O would pay twice. These
 * buffers are 4096-aligned: one memcpy (60-75 us a MiB here) instead of a
 * second request. On a local backing nothing is copied. A write's bytes
 * normally need no copy either: fs_recv.c has the FUSE device put them
 * into this buffer, aligned, in the first place.
 */
#ifndef PAGEFS_FS_ALIGN_H
#define PAGEFS_FS_ALIGN_H

#include <stddef.h>

#include "fs/fs.h"

/* The most memory pages a FUSE request of the backing carries: the
 * kernel's limit (FUSE_MAX_MAX_PAGES), which libfuse 3.14 negotiates for a
 * 1 MiB max_write. */
#define FS_BACKING_MAX_PAGES 256
#define FS_ALIGN 4096
/* A thread's buffer: a write of FS_MAX_WRITE, or what the FUSE device
 * hands fs_recv.c after a request's headers (libfuse reads one page more
 * than that). */
#define FS_ALIGN_BUF_SIZE (FS_MAX_WRITE + FS_ALIGN)

/* 1 if I/O of size bytes from buf to a FUSE backing would take more
 * requests than the same bytes from an aligned buffer. */
int fs_align_helps(const void *buf, size_t size);

/* This thread's aligned buffer of FS_ALIGN_BUF_SIZE bytes (allocated on
 * first use, freed when the thread exits), or NULL when memory is short.
 * A request handler may use it, except that a write's bytes may be in it
 * (fs_recv.h). */
void *fs_align_buf(void);

/* At most this many buffers are taken at once (FS_ALIGN_TAKEN_MAX MiB). */
#define FS_ALIGN_TAKEN_MAX 64

/* Takes this thread's buffer over when buf is it (the thread gets another
 * at its next fs_align_buf): returns buf, now the caller's, or NULL (buf
 * is not this thread's buffer, or FS_ALIGN_TAKEN_MAX are taken). */
void *fs_align_take(const void *buf);

/* Gives back a buffer fs_align_take returned; NULL does nothing. */
void fs_align_give(void *buf);

#endif
