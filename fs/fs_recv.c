/*
 * fs_recv.c - the FUSE device read that leaves a write's bytes page-aligned
 * (fs_recv.h), through libfuse's custom I/O hooks.
 *
 * The tail of each request goes to this thread's fs_align.h buffer, which
 * the handler of any other request is then free to use: its arguments
 * were copied back before libfuse saw them. A write keeps its bytes there
 * only when the request is laid out as this code expects (the header's
 * length is the two headers and the write's size); anything else is
 * copied back too, and libfuse finds it where it always does.
 */
#include "fs/fs_recv.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/fuse.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/fs_align.h"
#include "fs/fs_priv.h"
#include "meta/log.h"

#define HEAD (sizeof(struct fuse_in_header) + sizeof(struct fuse_write_in))

/* The write this thread is handling: where libfuse thinks its bytes are,
 * and where they are. */
static __thread const char *stub;
static __thread const char *payload;

static ssize_t recv_read(int fd, void *buf, size_t len, void *userdata)
{
	char *tail = fs_align_buf();
	const struct fuse_in_header *in = buf;
	const struct fuse_write_in *w = (const void *)((char *)buf + sizeof(*in));
	struct iovec iov[2];
	ssize_t n;

	(void)userdata;
	stub = payload = NULL;
	if (!tail || len <= HEAD || len - HEAD > FS_ALIGN_BUF_SIZE)
		return read(fd, buf, len);
	iov[0] = (struct iovec){.iov_base = buf, .iov_len = HEAD};
	iov[1] = (struct iovec){.iov_base = tail, .iov_len = len - HEAD};
	n = readv(fd, iov, 2);
	if (n <= (ssize_t)HEAD)
		return n;
	if (in->opcode == FUSE_WRITE && in->len == (size_t)n && w->size == (size_t)n - HEAD) {
		stub = (char *)buf + HEAD;
		payload = tail;
	} else {
		memcpy((char *)buf + HEAD, tail, (size_t)n - HEAD);
	}
	return n;
}

static ssize_t recv_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	return writev(fd, iov, count);
}

static ssize_t recv_splice_send(int fdin, off_t *offin, int fdout, off_t *offout, size_t len,
                                unsigned int flags, void *userdata)
{
	(void)userdata;
	return splice(fdin, offin, fdout, offout, len, flags);
}

int fs_recv_install(struct fuse_session *se)
{
	static const struct fuse_custom_io io = {
		.read = recv_read,
		.writev = recv_writev,
		.splice_send = recv_splice_send,
	};
	int ret = fuse_session_custom_io(se, &io, fuse_session_fd(se));

	if (ret < 0)
		log_warn("cannot read the FUSE device with readv (%s): page writes to a FUSE "
		         "backing are copied to aligned buffers instead",
		         strerror(-ret));
	return 0;
}

const char *fs_recv_payload(const char *buf)
{
	return buf == stub ? payload : buf;
}
