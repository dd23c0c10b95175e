/*
 * dirtime.c - the times a local filesystem would keep and the index has
 * no column for: a pool directory's mtime/ctime (the last publish,
 * rename, unlink or eviction of one of its pages) and a page's ctime
 * after a rename (docs/DECISIONS-posix.md).
 *
 * Nothing here writes the store per page. A pool's time lives in memory
 * (struct pool.dir_ns), moved by every page that joins or leaves the
 * pool's names (index_page_link_committed, index_page_unlink_committed) or is
 * replaced in place; at load it is the newest commit time of its pages,
 * or what a clean unmount recorded for it (setting "dir_time.POOL",
 * written once per pool at close), whichever is later. A crash forgets
 * the unlinks and renames since the last clean unmount that no page's
 * commit time covers.
 *
 * A page's ctime is its commit time, except after a rename: then the
 * rename's time, kept for the pages renamed since mount in a table by
 * page id (open addressing, linear probing, deletion by backward shift)
 * that costs nothing for pages never renamed. After a remount the ctime
 * of a renamed page is its commit time again (the index keeps no more).
 * Everything here is protected by meta.lock.
 */
#include "meta/log.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

static void dirtime_key(uint32_t pool_id, char *buf, size_t len)
{
	snprintf(buf, len, "dir_time.%u", pool_id);
}

void record_dirtimes_load(struct meta *m)
{
	for (struct pool *p = m->pools; p; p = p->next) {
		char key[32], val[32] = "";

		dirtime_key(p->id, key, sizeof(key));
		if (store_get_setting(m->store, key, val, sizeof(val)) == 0 && val[0])
			index_pool_changed(p, strtoll(val, NULL, 10));
		p->dir_saved_ns = p->dir_ns;
	}
}

void record_dirtimes_save(struct meta *m)
{
	if (m->cfg.read_only)
		return;
	index_lock(m);
	for (struct pool *p = m->pools; p; p = p->next) {
		if (p->removed || p->dir_ns <= p->dir_saved_ns)
			continue;
		struct rec *r = record_new(REC_SETTING);
		if (!r)
			break; /* (only a time is lost) */
		dirtime_key(p->id, r->key, sizeof(r->key));
		snprintf(r->value, sizeof(r->value), "%lld", (long long)p->dir_ns);
		p->dir_saved_ns = p->dir_ns;
		record_submit(m, r);
	}
	index_unlock(m);
}

/* ---- ctimes of renamed pages ---- */
