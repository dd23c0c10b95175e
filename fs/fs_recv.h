/*
 * fs_recv.h - reading requests from the FUSE device so that a write's
 * bytes land page-aligned.
 *
 * libfuse reads a request into one buffer, so a write's bytes follow its
 * 80 bytes of headers and start inside a page. Sent on to a FUSE backing
 * (3FS, the bench's passthrough_ll) as direct I/O, a 1 MiB write from
 * there spans 257 pages and goes as two requests; fs_align.h's bounce
 * buffer cost a 1 MiB memcpy a write instead. Here the device is read with
 * readv: the headers into libfuse's buffer, everything after them into
 * this thread's page-aligned buffer. A write's bytes stay there (the
 * write handler finds them with fs_recv_payload); any other request's
 * arguments are copied back behind the headers, where libfuse expects
 * them (a few bytes: names, xattr values, forget batches).
 *
 * Each libfuse worker reads a request and handles it on the same thread
 * before it reads the next, so the buffer is the handler's until it
 * returns.
 */
#ifndef PAGEFS_FS_RECV_H
#define PAGEFS_FS_RECV_H

#include <stddef.h>

struct fuse_session;

/* Makes se read requests as above. Called once se is mounted; on an error
 * (0 is returned either way) se keeps libfuse's own reads. */
int fs_recv_install(struct fuse_session *se);

/* The bytes of the write request this thread is handling, given the
 * pointer libfuse passed the write handler: the aligned copy the device
 * wrote them to, or buf itself when they are in libfuse's buffer. */
const char *fs_recv_payload(const char *buf);

#endif
