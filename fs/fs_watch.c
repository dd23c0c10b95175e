/*
 * fs_watch.c - the FUSE connection of a mount point, and the watchdog
 * that aborts it when the daemon is killed.
 *
 * After `kill -9` a daemon thread that was invalidating a name in the
 * kernel can stay blocked there: it waits for the directory's lock, held
 * by a client's request that waits for the dead daemon. That thread keeps
 * the process, and so its /dev/fuse descriptor, alive; the kernel aborts
 * a connection only when the descriptor closes, so every process using
 * the mount blocked, unkillable, until `pagefs umount --force`. The
 * watchdog is a child forked at mount time that holds no descriptor of
 * the daemon's and waits for the death of the daemon's main thread
 * (PR_SET_PDEATHSIG); then it aborts the connection through fusectl, the
 * blocked requests fail with ECONNABORTED, and the daemon's last thread
 * exits. A clean stop kills the watchdog first (fs_watch_stop), so that
 * it never aborts a connection number a later mount reuses.
 *
 * The child only makes system calls (it is forked from a process with
 * threads).
 */
#include "fs/fs.h"
#include "meta/log.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

/* mountinfo escapes blanks, tabs, newlines and backslashes as \ooo. */
static void unescape_octal(char *s)
{
	char *w = s;

	for (; *s; s++) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '7' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*w++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 3;
		} else {
			*w++ = *s;
		}
	}
	*w = '\0';
}

int fs_fuse_conn(const char *mp, unsigned *conn)
{
	char line[8192], dev[64], point[4096], fstype[256];
	unsigned major, minor;
	int found = -ENOENT;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	if (!f)
		return -errno;
	/* "id parent major:minor root point opts [tags] - fstype source ..." */
	while (fgets(line, sizeof(line), f)) {
		char *dash = strstr(line, " - ");
		if (!dash || sscanf(line, "%*s %*s %63s %*s %4095s", dev, point) != 2 ||
		    sscanf(dash + 3, "%255s", fstype) != 1 ||
		    sscanf(dev, "%u:%u", &major, &minor) != 2)
			continue;
		unescape_octal(point);
		if (strcmp(point, mp) == 0 && strncmp(fstype, "fuse", 4) == 0) {
			*conn = minor;
			found = strcmp(fstype, "fuse.pagefs") == 0 ? 0 : -EPERM;
		}
	}
	fclose(f);
	return found;
}

/* The abort file of connection conn. */
static void abort_path(unsigned conn, char *buf, size_t len)
{
	snprintf(buf, len, "/sys/fs/fuse/connections/%u/abort", conn);
}

/* Writes path, an abort file (fusectl mounted if need be). System calls
 * only: the watchdog calls it. 0 or -errno. */
static int abort_at(const char *path)
{
	int fd;

	if (access(path, F_OK) < 0)
		mount("fusectl", "/sys/fs/fuse/connections", "fusectl", 0, NULL);
	if ((fd = open(path, O_WRONLY | O_CLOEXEC)) < 0)
		return -errno;
	int rc = write(fd, "1", 1) == 1 ? 0 : -errno;
	close(fd);
	return rc;
}

int fs_fuse_abort(unsigned conn)
{
	char path[96];

	abort_path(conn, path, sizeof(path));
	return abort_at(path);
}

/* The child: waits for the daemon's main thread to die, then aborts. */
static void watch(pid_t daemon, const char *path)
{
	sigset_t all;
	int sig;

	close_range(0, ~0U, 0); /* holds nothing of the daemon's: no /dev/fuse, no index */
	sigfillset(&all);
	sigprocmask(SIG_BLOCK, &all, NULL);
	prctl(PR_SET_NAME, "pagefs-watch", 0, 0, 0);
	if (prctl(PR_SET_PDEATHSIG, SIGUSR1, 0, 0, 0) < 0)
		_exit(1);
	if (getppid() == daemon) {
		sigemptyset(&all);
		sigaddset(&all, SIGUSR1);
		sigaddset(&all, SIGTERM);
		if (sigwait(&all, &sig) != 0 || sig != SIGUSR1)
			_exit(0); /* fs_watch_stop: a clean stop */
	}
	(void)abort_at(path); /* nothing to tell anyone: it exits either way */
	_exit(0);
}

pid_t fs_watch_start(const char *mountpoint)
{
	char path[96];
	unsigned conn = 0; /* set whenever fs_fuse_conn returns 0 (fopen sets errno) */
	pid_t daemon = getpid(), pid;

	if (fs_fuse_conn(mountpoint, &conn) < 0) {
		log_warn("no FUSE connection found for %s in /proc/self/mountinfo: a kill -9 of "
		         "this daemon may leave its mount hung (pagefs umount --force clears it)",
		         mountpoint);
		return 0;
	}
	abort_path(conn, path, sizeof(path)); /* (not in the child: snprintf) */
	if ((pid = fork()) < 0) {
		log_warn("cannot start the watchdog of %s: %s", mountpoint, strerror(errno));
		return 0;
	}
	if (pid == 0)
		watch(daemon, path);
	return pid;
}

void fs_watch_stop(pid_t pid)
{
	if (pid <= 0)
		return;
	kill(pid, SIGTERM);
	while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
		;
}
