/*
 * data.c - the pools' data files on the backing directory, named and laid
 * out as SGLang's HiCacheHF3FS names them: {prefix}.{rank}.bin for the kv
 * pool, {prefix}.{rank}.bin.{namespace} for the others, page i at byte
 * i * slot_size. Files are grown sparse to the pool's capacity.
 */
#include "meta/hash.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

#define CHECKSUM_CHUNK (256u << 10)

int record_data_path_of(const char *backing, const char *prefix, int rank, const char *ns,
                        char *buf, size_t len)
{
	int n;

	if (strcmp(ns, "kv") == 0)
		n = snprintf(buf, len, "%s/%s.%d.bin", backing, prefix, rank);
	else
		n = snprintf(buf, len, "%s/%s.%d.bin.%s", backing, prefix, rank, ns);
	return n < 0 || (size_t)n >= len ? -ENAMETOOLONG : 0;
}

int record_data_path(const struct meta *m, int rank, const char *ns, char *buf, size_t len)
{
	return record_data_path_of(m->backing, m->prefix, rank, ns, buf, len);
}

int record_data_open(const char *path, uint64_t size, int read_only, int *fd, int *made)
{
	struct stat st;
	int f = open(path, (read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC), created = 0, e = 0;

	if (f < 0 && errno == ENOENT && !read_only) {
		f = open(path, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
		created = f >= 0;
		if (f < 0 && errno == EEXIST) /* made meanwhile, or a dangling link */
			f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	}
	if (made)
		*made = 0;
	if (f < 0)
		return -errno;
	if (fstat(f, &st) < 0)
		e = errno;
	else if (!S_ISREG(st.st_mode))
		e = EINVAL;
	else if (!read_only && (uint64_t)st.st_size < size)
		e = ftruncate(f, (off_t)size) < 0 ? errno : 0;
	if (e) {
		close(f);
		if (created)
			unlink(path); /* what this call made and could not size */
		return -e;
	}
	if (made)
		*made = created;
	*fd = f;
	return 0;
}

/* Fills buf with len bytes of fd at off. 0 or -errno (-ENODATA: the
 * file ends before). */
static int read_full(int fd, char *buf, size_t len, uint64_t off)
{
	while (len > 0) {
		ssize_t n = pread(fd, buf, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENODATA;
		buf += n;
		len -= (size_t)n;
		off += (uint64_t)n;
	}
	return 0;
}

/* Checksums [off, off + len) of fd in CHECKSUM_CHUNK reads, or, with
 * keep, in one read into keep (len bytes), which then holds the bytes. */
static int checksum(int fd, uint64_t off, uint64_t len, char *keep, uint64_t *out)
{
	XXH3_state_t *st = XXH3_createState();
	void *chunk_buf = NULL;
	char *buf = keep;
	int ret = 0;

	/* Aligned: a read of a FUSE backing then takes one request a chunk. */
	if (!keep && posix_memalign(&chunk_buf, 4096, CHECKSUM_CHUNK) == 0)
		buf = chunk_buf;
	if (!st || !buf) {
		ret = -ENOMEM;
		goto out;
	}
	XXH3_64bits_reset(st);
	while (len > 0) {
		uint64_t chunk = keep ? len : CHECKSUM_CHUNK;
		size_t want = (size_t)(len < chunk ? len : chunk);
		ret = read_full(fd, buf, want, off);
		if (ret < 0)
			goto out;
		meta_hash_update(st, buf, want);
		off += want;
		len -= want;
	}
	*out = XXH3_64bits_digest(st);
out:
	free(chunk_buf);
	XXH3_freeState(st);
	return ret;
}

int meta_checksum_range(int fd, uint64_t off, uint64_t len, uint64_t *out)
{
	return checksum(fd, off, len, NULL, out);
}

int meta_checksum_read(int fd, uint64_t off, uint64_t len, void *buf, uint64_t *out)
{
	return checksum(fd, off, len, buf, out);
}
