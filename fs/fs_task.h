/*
 * fs_task.h - what /proc tells about the task behind a FUSE request.
 *
 * FUSE flush arrives for every close() of every descriptor of an open
 * file, including the copies a fork()ed child closes at exec and the
 * implicit closes of a task being killed. The commit (fs_commit.c) asks
 * these two questions to tell the writer's own close from those.
 *
 * A request's pid is a thread id in the daemon's pid namespace, or 0 when
 * the task is outside it; then nothing can be told and both answer "no".
 */
#ifndef PAGEFS_FS_TASK_H
#define PAGEFS_FS_TASK_H

#include <sys/types.h>

/* The process (thread group) id of thread tid, or 0 if unknown. */
pid_t fs_task_tgid(pid_t tid);
/* 1 if thread tid is exiting because of a signal (killed or crashed);
 * 0 if it is not exiting, exits normally, or cannot be told. */
int fs_task_killed(pid_t tid);

#endif
