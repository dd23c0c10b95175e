/*
 * owner.c - the files beside an index that say who holds it: the SQLite
 * index's daemon lock (flock on PATH.lock) and the backing directory's
 * owner file (which index its data files belong to; fsck reads it).
 */
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/file.h>
#include <unistd.h>

int store_index_lock(const char *db_path, int *fd, char *err, size_t errlen)
{
	char path[PATH_MAX + 8], pid[32] = "";

	snprintf(path, sizeof(path), "%s.lock", db_path);
	*fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
	if (*fd < 0) {
		int e = errno;
		snprintf(err, errlen, "cannot open index lock %s: %s", path, strerror(e));
		return -e;
	}
	if (flock(*fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		ssize_t n = pread(*fd, pid, sizeof(pid) - 1, 0);
		pid[n > 0 ? n : 0] = '\0';
		pid[strcspn(pid, "\n")] = '\0';
		snprintf(err, errlen,
		         "index %s is in use by another pagefs daemon (pid %s); unmount that mount "
		         "first ('pagefs umount'), or give this one its own --meta",
		         db_path, pid[0] ? pid : "unknown");
		close(*fd);
		*fd = -1;
		return e == EWOULDBLOCK ? -EBUSY : -e;
	}
	int n = snprintf(pid, sizeof(pid), "%d\n", (int)getpid());
	if (ftruncate(*fd, 0) < 0 || pwrite(*fd, pid, (size_t)n, 0) != n)
		log_warn("cannot record the daemon pid in %s", path);
	return 0;
}

int store_read_owner(const char *backing, char *id, size_t len)
{
	char path[PATH_MAX + 32], buf[512];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", backing, OWNER_FILE);
	if (!(f = fopen(path, "re")))
		return errno == ENOENT ? -ENOENT : -errno;
	id[0] = '\0';
	while (fgets(buf, sizeof(buf), f))
		if (sscanf(buf, "index_id %63s", id) == 1)
			break;
	fclose(f);
	(void)len;
	return id[0] ? 0 : -EINVAL;
}

int store_write_owner(const char *backing, const char *uri, const char *id)
{
	char path[PATH_MAX + 32], tmp[PATH_MAX + 40];
	FILE *f;

	snprintf(path, sizeof(path), "%s/%s", backing, OWNER_FILE);
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	if (!(f = fopen(tmp, "we")))
		return -errno;
	fprintf(f, "pagefs-owner 1\nindex_id %s\nmeta %s\n", id, uri);
	if (fflush(f) != 0 || fsync(fileno(f)) < 0) {
		int e = errno;
		fclose(f);
		unlink(tmp);
		return -e;
	}
	fclose(f);
	return rename(tmp, path) < 0 ? -errno : 0;
}
