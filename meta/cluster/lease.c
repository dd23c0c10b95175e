/*
 * lease.c - how long this node can be sure that it is still a node of a
 * shared (PostgreSQL) index, by its own clock.
 *
 * Another node's heartbeat removes a node whose last renewal is over
 * STORE_REAP_SURE_NS old and whose sync session is gone, or whose lease
 * ran out; its chunks go back to the pool and other nodes rewrite their
 * slots, and they stop waiting for its acknowledgement before they reuse
 * a slot its mirror still names. A daemon that was stopped (SIGSTOP, a
 * paused VM) or cut off from the database for longer cannot tell until
 * its next heartbeat: its writers would write into slots another node now
 * holds, its readers read slots another node rewrote. So the bytes of a
 * page are written or read only while the last renewal whose transaction
 * began at most LEASE_SURE_NS ago succeeded (meta_lease_hold); otherwise
 * the caller waits for the next heartbeat: renewed, it goes on; removed
 * (fenced), -EIO, as for everything this node does from then on.
 *
 * The clock is CLOCK_BOOTTIME: it runs while the process is stopped and
 * while the machine sleeps, as the database's clock does.
 *
 * What this cannot close: a thread stopped after its check and before its
 * pwrite()/pread() returns, for longer than the removal takes
 * (docs/NEMESIS.md, "What is left"). The backing directory is a plain
 * shared filesystem: nothing there can refuse a write of a node that is
 * no longer one.
 *
 * Locks: lease_lock only (a leaf); the fast path takes none.
 */
#include "meta/cluster.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <time.h>

/* The reap rule's 2 s, less half a second for the time between the clock
 * read and the transaction's now(), and clock rates. */
#define LEASE_SURE_NS (STORE_REAP_SURE_NS - 500000000LL)
/* How long a reader or writer waits for a heartbeat that renews. */
#define LEASE_WAIT_NS 10000000000LL
#define NS_PER_S 1000000000LL

int64_t cluster_lease_clock(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_BOOTTIME, &ts);
	return (int64_t)ts.tv_sec * NS_PER_S + ts.tv_nsec;
}

void cluster_lease_init(struct meta *m)
{
	pthread_mutex_init(&m->lease_lock, NULL);
	pthread_condattr_t ca;
	pthread_condattr_init(&ca);
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	pthread_cond_init(&m->lease_cond, &ca);
	pthread_condattr_destroy(&ca);
	atomic_store(&m->lease_sure_until, 0);
}

void cluster_lease_destroy(struct meta *m)
{
	pthread_cond_destroy(&m->lease_cond);
	pthread_mutex_destroy(&m->lease_lock);
}

void cluster_lease_renewed(struct meta *m, int64_t began)
{
	pthread_mutex_lock(&m->lease_lock);
	if (atomic_load(&m->lease_sure_until) < began + LEASE_SURE_NS)
		atomic_store(&m->lease_sure_until, began + LEASE_SURE_NS);
	pthread_cond_broadcast(&m->lease_cond);
	pthread_mutex_unlock(&m->lease_lock);
}

void cluster_lease_lost(struct meta *m)
{
	pthread_mutex_lock(&m->lease_lock);
	atomic_store(&m->lease_sure_until, 0);
	m->lease_fenced = 1;
	pthread_cond_broadcast(&m->lease_cond);
	pthread_mutex_unlock(&m->lease_lock);
}

int meta_lease_hold(struct meta *m)
{
	if (!m->shared)
		return 0;
	int64_t now = cluster_lease_clock();
	if (now < atomic_load(&m->lease_sure_until))
		return 0;
	int64_t until = now + LEASE_WAIT_NS;
	int rc = -EIO;
	pthread_mutex_lock(&m->lease_lock);
	while (!m->lease_fenced) {
		now = cluster_lease_clock();
		if (now < atomic_load(&m->lease_sure_until)) {
			rc = 0;
			break;
		}
		if (now >= until)
			break;
		cluster_sync_kick(m);
		struct timespec ts;
		clock_gettime(CLOCK_MONOTONIC, &ts);
		ts.tv_nsec += 50000000L; /* a heartbeat comes every 200 ms */
		if (ts.tv_nsec >= NS_PER_S) {
			ts.tv_sec++;
			ts.tv_nsec -= NS_PER_S;
		}
		pthread_cond_timedwait(&m->lease_cond, &m->lease_lock, &ts);
	}
	pthread_mutex_unlock(&m->lease_lock);
	return rc;
}
