/*
 * fence.c - HTTP reservations that outlive the daemon (index of one
 * daemon).
 *
 * An HTTP client writes a reserved slot straight into the data file,
 * possibly after the daemon that reserved it crashed or was restarted: a
 * daemon that does not know the reservation would hand that slot to
 * another key, or to a FUSE writer, whose page then holds the late
 * writer's bytes. So before it hands out a reservation, a daemon records
 * in the index (setting "resv_fence.POOL": "UNTIL WINDOW", wall-clock ns)
 * until when a slot reserved now may still be written: the reservation's
 * timeout and the quarantine after it, FENCE_AHEAD_NS more so that the
 * record is written once in that time at most (WINDOW: that span, which
 * bounds the hold if the clock jumped ahead). A mount that finds that
 * time still ahead marks every slot free in the pool used until then
 * (index_slots_fence): pages are written meanwhile into slots that eviction or
 * deletion frees (through the quarantine for the protocol's writers). The
 * record only ever grows while it is in force (a daemon with a shorter
 * --reserve-timeout keeps the earlier one's), and a clean stop with no
 * reservation outstanding and no slot in quarantine clears it, down to
 * the record it found if that is still in force. A slot freed into the
 * quarantine is recorded the same way (until the quarantine ends), not
 * waited for: a client that looked its page up may read it after a
 * restart too. A shared index does not do this (docs/DECISIONS.md).
 *
 * Locks: meta.lock held on entry and return; dropped while a record is
 * waited for.
 */
#include "meta/keys.h"
#include "meta/log.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#define FENCE_AHEAD_NS (5 * SEC)

static void fence_key(uint32_t pool_id, char *buf, size_t len)
{
	snprintf(buf, len, "resv_fence.%u", pool_id);
}

/* The record "value window" of pool_id, queued (waited: for record_wait),
 * or NULL (out of memory). meta.lock held. */
static struct rec *fence_rec(struct meta *m, uint32_t pool_id, int64_t value, int64_t window,
                             int waited)
{
	index_assert_locked(m);
	struct rec *r = record_new(REC_SETTING);

	if (!r)
		return NULL;
	fence_key(pool_id, r->key, sizeof(r->key));
	snprintf(r->value, sizeof(r->value), "%lld %lld", (long long)value, (long long)window);
	r->waited = waited;
	record_submit(m, r);
	return r;
}

/* Records until when pool_id's slots may be written by its clients, as
 * value (wall-clock ns; 0: by none), and waits for it. 0 or -errno. */
static int fence_write(struct meta *m, uint32_t pool_id, int64_t value, int64_t window)
{
	struct rec *r = fence_rec(m, pool_id, value, window, 1);

	if (!r)
		return -ENOMEM;
	index_unlock(m);
	int rc = record_wait(m, r);
	index_lock(m);
	return rc;
}

/* What to record for slots that may be written for span ns from now:
 * 0 when kp's record covers them already, else the value (never below
 * the record an earlier daemon left, still in force) and its window. */
static int64_t fence_need(const struct pool *pool, const struct kpool *kp, int64_t span,
                          int64_t *window)
{
	int64_t need = index_now_ns() + span, value = need + FENCE_AHEAD_NS;

	if (kp->fence_until >= need)
		return 0;
	*window = span + FENCE_AHEAD_NS;
	if (pool->fence_record > value) {
		*window += pool->fence_record - value;
		value = pool->fence_record;
	}
	return value;
}

int keys_fence_ahead(struct meta *m, struct pool *pool, struct kpool *kp)
{
	int64_t window = 0, value;

	if (m->shared ||
	    !(value = fence_need(pool, kp, m->keys->t.reserve_timeout_ns + m->keys->t.quarantine_ns,
	                         &window)))
		return 0;
	int rc = fence_write(m, pool->id, value, window);
	if (rc == 0 && value > kp->fence_until)
		kp->fence_until = value;
	return rc;
}

void keys_fence_freed(struct meta *m, struct pool *pool, struct kpool *kp)
{
	int64_t window = 0, value;

	if (m->shared || m->cfg.read_only ||
	    !(value = fence_need(pool, kp, m->keys->t.quarantine_ns, &window)))
		return;
	/* With the free or right after it; not waited for. (Out of memory:
	 * the slot's quarantine still holds while this daemon runs.) */
	if (fence_rec(m, pool->id, value, window, 0))
		kp->fence_until = value;
}

void keys_fence_clear(struct meta *m, struct kpool *kp)
{
	if (m->shared || m->cfg.read_only || !kp->fence_until)
		return;
	if (kp->quar_q.len)
		return; /* slots in quarantine: the record holds them past a restart */
	for (size_t i = 0; i < kp->resv_q.len; i++) {
		const struct fifo_ent *e = fifo_at(&kp->resv_q, i);
		for (uint64_t s = e->lo; s < e->lo + e->n; s++) {
			if (keys_resv_get(kp, s) == e->at) {
				log_info("pool %u: reservations are outstanding: after a restart "
				         "its free slots stay held until they could have been "
				         "written",
				         kp->pool_id);
				return;
			}
		}
	}
	struct pool *p = index_pool_by_id(m, kp->pool_id);
	int64_t keep = p && p->fence_record > index_now_ns() ? p->fence_record : 0;
	if (fence_write(m, kp->pool_id, keep, keep ? keep - index_now_ns() : 0) == 0)
		kp->fence_until = keep;
}

int keys_fences_load(struct meta *m)
{
	if (m->shared || m->cfg.read_only)
		return 0;
	for (struct pool *p = m->pools; p; p = p->next) {
		char key[32], val[32] = "";
		fence_key(p->id, key, sizeof(key));
		if (store_get_setting(m->store, key, val, sizeof(val)) < 0 || !val[0])
			continue;
		char *end;
		int64_t until = strtoll(val, &end, 10), window = strtoll(end, NULL, 10);
		int64_t left = until - index_now_ns();
		if (left <= 0)
			continue;
		if (window <= 0 || window > 86400 * SEC + 11 * SEC)
			window = 86400 * SEC + 11 * SEC; /* (the longest --reserve-timeout) */
		if (left > window) {
			log_warn("pool %u/%s: the index holds its slots %lld s ahead, longer than "
			         "they were reserved for (the clock changed): held for %lld s",
			         p->rank, p->ns, (long long)(left / SEC),
			         (long long)(window / SEC));
			left = window;
		}
		p->fence_record = index_now_ns() + left;
		uint64_t used = p->nused;
		int rc = index_slots_fence(p, mono_ns() + left);
		if (rc < 0)
			return rc;
		log_warn("pool %u/%s: the daemon before held reservations its HTTP clients may "
		         "still write: its %llu free slots are held for %lld s more",
		         p->rank, p->ns, (unsigned long long)(p->nused - used),
		         (long long)((left + SEC - 1) / SEC));
	}
	return 0;
}
