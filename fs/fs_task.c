/*
 * fs_task.c - reading /proc/<tid>/status and /proc/<tid>/stat (see
 * fs_task.h). Each answer costs an open and a read of a small procfs file,
 * so callers ask only when the cheap comparisons of thread ids fail.
 *
 * A killed task: the kernel sets PF_EXITING and the task's exit code before
 * it closes the task's files, so a flush sent from an exit shows both in
 * /proc/<tid>/stat (fields 9 and 52). A signal in the low 7 bits of the
 * exit code means killed or crashed; a plain exit() is a normal close.
 *
 * Most flushes come from a plain close() of a live task, and reading
 * /proc/<tid>/stat costs 8 to 16 us a commit. An exiting task gives up its
 * address space before it closes its files (do_exit: exit_mm, then
 * exit_files), so a task that still has one is not exiting: one
 * process_vm_readv of a byte at address 0 says which (EFAULT: it has
 * memory; ESRCH: no task, or no memory left), about 1.4 us. Any other
 * answer (EPERM without CAP_SYS_PTRACE) falls back to /proc.
 */
#include "fs/fs_task.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#define PF_EXITING 0x00000004UL /* include/linux/sched.h */

/* Reads /proc/<tid>/<file> into buf. Bytes read, or -errno. */
static ssize_t read_proc(pid_t tid, const char *file, char *buf, size_t len)
{
	char path[64];
	ssize_t n;
	int fd;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)tid, file);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	do
		n = read(fd, buf, len - 1);
	while (n < 0 && errno == EINTR);
	if (n < 0)
		n = -errno;
	close(fd);
	if (n >= 0)
		buf[n] = '\0';
	return n;
}

pid_t fs_task_tgid(pid_t tid)
{
	char buf[2048];
	char *p;

	if (tid <= 0 || read_proc(tid, "status", buf, sizeof(buf)) <= 0)
		return 0;
	p = strstr(buf, "\nTgid:");
	return p ? (pid_t)strtol(p + 6, NULL, 10) : 0;
}

int fs_task_killed(pid_t tid)
{
	char buf[1024];
	char *p, *tok, *save = NULL;
	unsigned long flags = 0;
	long long code = -1;
	ssize_t n;
	int field;

	if (tid <= 0)
		return 0;
	char byte;
	struct iovec mine = {&byte, 1}, theirs = {NULL, 1};
	if (process_vm_readv(tid, &mine, 1, &theirs, 1, 0) < 0 && errno == EFAULT)
		return 0; /* it still has its memory: not exiting (header) */
	n = read_proc(tid, "stat", buf, sizeof(buf));
	if (n == -ENOENT || n == -ESRCH || n == 0)
		return 1; /* already gone: it was not closing on purpose */
	if (n < 0)
		return 0;
	/* Fields count from 1; the command (field 2) may hold spaces and
	 * parentheses, so start after its last ')'. */
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	field = 2;
	for (tok = strtok_r(p + 1, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
		field++;
		if (field == 9)
			flags = strtoul(tok, NULL, 10);
		else if (field == 52)
			code = strtoll(tok, NULL, 10);
	}
	if (!(flags & PF_EXITING))
		return 0;
	if (code < 0)
		return 1; /* a kernel too old to show it: assume the worst */
	return (code & 0x7f) != 0;
}
