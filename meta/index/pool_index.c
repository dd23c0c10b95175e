/*
 * pool_index.c - lets a page name its pool in 2 bytes instead of an
 * 8-byte pointer: a process-wide table of the pools alive in it.
 *
 * A pool is entered when it is made (index_pool_new) and leaves when it is
 * freed (index_pool_free), after its last page: an index stays valid while a
 * page holds it. At most POOLS_MAX pools at once in a process, shared by
 * every index it opens; past that a new pool is refused (ENOSPC), which
 * takes more (rank, namespace) pools than any deployment has. Entering
 * and leaving take a mutex; reading a pool by index (page_pool) takes no
 * lock: an index reaches a reader only through a page, after the locks
 * that published the page and therefore its pool.
 */
#include "meta/index.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
struct pool *pool_index[POOLS_MAX + 1]; /* 0 unused */
static unsigned next = 1;               /* where the search for a free entry starts */

struct pool *index_pool_new(void)
{
	struct pool *p = calloc(1, sizeof(*p));

	if (!p)
		return NULL;
	p->fd = -1; /* no data file yet: index_pool_free closes only an open one */
	pthread_mutex_lock(&lock);
	for (unsigned n = 0; n < POOLS_MAX; n++) {
		unsigned i = (next - 1 + n) % POOLS_MAX + 1;
		if (!pool_index[i]) {
			pool_index[i] = p;
			p->ix = (uint16_t)i;
			next = i % POOLS_MAX + 1;
			break;
		}
	}
	pthread_mutex_unlock(&lock);
	if (!p->ix) {
		free(p);
		errno = ENOSPC;
		return NULL;
	}
	return p;
}

void index_pool_index_drop(struct pool *p)
{
	pthread_mutex_lock(&lock);
	if (p->ix && pool_index[p->ix] == p)
		pool_index[p->ix] = NULL;
	pthread_mutex_unlock(&lock);
}
