/*
 * lock.h - lock preconditions that run: an owner field beside a mutex,
 * set by whoever takes it, and assertions that the caller holds it (or
 * does not).
 *
 * Built in when PAGEFS_CHECKS is defined (the sanitizer and Debug builds,
 * CMakeLists.txt); otherwise every call here compiles to nothing. A
 * failed assertion logs the lock, the place and the thread, and aborts:
 * it is a bug in the caller, never a condition to handle.
 */
#ifndef PAGEFS_META_LOCK_H
#define PAGEFS_META_LOCK_H

#include <pthread.h>
#include <stdatomic.h>

/* Who holds a mutex: a thread's lock_self(), 0 when nobody. */
struct lock_owner {
	_Atomic unsigned long tid;
};

#ifdef PAGEFS_CHECKS
#define LOCK_CHECKS 1
#else
#define LOCK_CHECKS 0
#endif

/* This thread's id as lock_owner keeps it (never 0). */
unsigned long lock_self(void);
/* Logs "what: held|not held expected at file:line" and aborts. */
_Noreturn void lock_fail(const char *what, int held, const char *file, int line);

static inline void lock_taken(struct lock_owner *o)
{
	if (LOCK_CHECKS)
		atomic_store_explicit(&o->tid, lock_self(), memory_order_relaxed);
}

static inline void lock_released(struct lock_owner *o)
{
	if (LOCK_CHECKS)
		atomic_store_explicit(&o->tid, 0, memory_order_relaxed);
}

static inline int lock_mine(const struct lock_owner *o)
{
	return atomic_load_explicit(&((struct lock_owner *)o)->tid, memory_order_relaxed) ==
	       lock_self();
}

#define lock_assert_held(o, what)                                                                  \
	((void)(!LOCK_CHECKS || lock_mine(o) || (lock_fail(what, 1, __FILE__, __LINE__), 0)))
#define lock_assert_not_held(o, what)                                                              \
	((void)(!LOCK_CHECKS || !lock_mine(o) || (lock_fail(what, 0, __FILE__, __LINE__), 0)))

#endif
