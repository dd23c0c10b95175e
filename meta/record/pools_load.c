/*
 * pools_load.c - a pool from its store row: the struct, its data file
 * opened (or, deferred, only looked at until the load knows its pages).
 * Used by the load at open and by the sync thread's reloads.
 */
#include "meta/log.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int record_pool_from_row(struct meta *m, const struct store_pool_row *row, int defer,
                         struct pool **out, char *err, size_t errlen)
{
	char path[4096];
	struct pool *p = index_pool_new();
	int rc;

	if (!p) {
		snprintf(err, errlen, "%s",
		         errno == ENOSPC ? "too many pools in one process" : "out of memory");
		return errno == ENOSPC ? -ENOSPC : -ENOMEM;
	}
	p->id = row->id;
	p->rank = row->rank;
	memcpy(p->ns, row->ns, sizeof(p->ns));
	p->slot_size = row->slot_size;
	p->capacity = row->capacity;
	p->shared = (uint8_t)m->shared;
	p->chunk_slots = pool_chunk_slots(p->capacity);
	if (p->slot_size && meta_check_geometry(p->slot_size, p->capacity) < 0) {
		snprintf(err, errlen,
		         "index %s: pool %u/%s has %llu slots of %llu bytes; this version of "
		         "pagefs allows at most %llu slots of at most %llu bytes",
		         m->db_path, p->rank, p->ns, (unsigned long long)p->capacity,
		         (unsigned long long)p->slot_size, (unsigned long long)META_SLOTS_MAX,
		         (unsigned long long)META_SLOT_SIZE_MAX);
		index_pool_free(p);
		return -EINVAL;
	}
	if (p->slot_size == 0 || meta_check_ns(p->ns) < 0 ||
	    record_data_path(m, p->rank, p->ns, path, sizeof(path)) < 0 ||
	    !(p->data_path = strdup(path))) {
		snprintf(err, errlen, "index %s has a malformed pool (id %u); run 'pagefs fsck'",
		         m->db_path, row->id);
		index_pool_free(p);
		return -EIO;
	}
	if (defer) {
		struct stat st;
		if (stat(path, &st) == 0)
			p->data_size = (uint64_t)st.st_size;
		else
			p->data_missing = 1; /* (any other error: record_pool_open_data says it) */
	} else if ((rc = record_pool_open_data(m, p, err, errlen)) < 0) {
		index_pool_free(p);
		return rc;
	}
	*out = p;
	return 0;
}

int record_pool_open_data(struct meta *m, struct pool *p, char *err, size_t errlen)
{
	int rc = record_data_open(p->data_path, p->capacity * p->slot_size, m->cfg.read_only,
	                          &p->fd, NULL);

	if (rc < 0)
		snprintf(err, errlen, "cannot open data file %s: %s", p->data_path, strerror(-rc));
	return rc;
}
