/*
 * lock.c - what lock.h's checks need out of line: a thread's id, and the
 * report of a broken lock precondition.
 */
#include "meta/lock.h"
#include "meta/log.h"

#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

unsigned long lock_self(void)
{
	static _Thread_local unsigned long self;

	if (!self)
		self = (unsigned long)syscall(SYS_gettid);
	return self;
}

void lock_fail(const char *what, int held, const char *file, int line)
{
	log_error("lock check: %s must %sbe held at %s:%d (thread %lu)", what, held ? "" : "not ",
	          file, line, lock_self());
	abort();
}
