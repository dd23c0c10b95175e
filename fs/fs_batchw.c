/*
 * fs_batchw.c - batch writes through the ioctl channel (pagefs_ioctl.h,
 * RESERVE and COMMIT on an open pool directory).
 *
 * A client that writes page bytes into the data file itself (a placed
 * write, fs_place.c) needs from the daemon only a slot per page and, once
 * the bytes are there, the commit. RESERVE reserves a slot for each name
 * of a batch, as open(O_CREAT) would, and the directory's handle keeps the
 * reservations under a token (fs_pin.h); the client writes the slots and
 * COMMIT publishes each page with the length and checksum it gives, as
 * close() would: each page whole or not at all, a page of the same name
 * replaced atomically; the batch's commits go to the index together
 * (meta_page_commit_many: one transaction, one wait). Two requests a batch, where a page written through
 * the mount costs a lookup, a create, its writes, a flush and a release.
 * Closing the directory (a client that dies) or unmount aborts what is
 * still reserved: nothing of it is published.
 *
 * Pages published here were created by no request of this kernel, which
 * may hold a negative entry for their names: each name's entry is
 * invalidated, and COMMIT answers once the last invalidation has reached
 * the kernel (bounded, as close() waits for a replacement's), so a stat
 * after it finds the page.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/fs_inode.h"
#include "fs/fs_inval.h"
#include "fs/pagefs_ioctl.h"
#include "meta/log.h"

#define HDR sizeof(struct pagefs_ioc_hdr)
#define REC sizeof(struct pagefs_ioc_rec)

/* How long COMMIT waits for its entry invalidations to reach the kernel. */
#define INVAL_WAIT_MS 500

int fs_batchw_reserve(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id, const char **names,
                      struct pagefs_ioc_hdr *h, char *out, size_t *len)
{
	struct meta_pool_info pool;
	struct fs_resvset *s;
	uint64_t token;
	size_t path_len, at = HDR + 2 * sizeof(uint64_t);
	int ret = meta_pool_get(fs->meta, pool_id, &pool);

	if (ret < 0)
		return ret;
	path_len = strlen(pool.data_file);
	if (at + (size_t)h->count * REC + path_len + 1 > PAGEFS_IOC_SIZE)
		return -E2BIG;
	ret = meta_lease_hold(fs->meta); /* slots are ours only while the lease is */
	if (ret < 0)
		return ret;
	s = calloc(1, sizeof(*s) + (size_t)h->count * sizeof(s->e[0]));
	if (!s)
		return -ENOMEM;
	s->n = h->count;
	for (uint32_t i = 0; i < h->count; i++) {
		struct fs_resv_ent *e = &s->e[i];

		e->err = meta_check_name(names[i]);
		if (e->err == 0)
			e->err = meta_page_reserve(fs->meta, pool_id, names[i], 0, &e->r);
	}
	/* The reply is made before d takes s (s is d's then). */
	memcpy(out + HDR, &pool.slot_size, sizeof(uint64_t));
	for (uint32_t i = 0; i < h->count; i++, at += REC) {
		struct pagefs_ioc_rec rec = {.err = s->e[i].err};

		if (rec.err == 0)
			rec.offset = s->e[i].r.slot * s->e[i].r.slot_size;
		memcpy(out + at, &rec, sizeof(rec));
	}
	memcpy(out + at, pool.data_file, path_len + 1);
	ret = fs_dirh_keep_resv(d, s, &token);
	if (ret < 0) {
		fs_resvset_abort(fs->meta, s);
		return ret;
	}
	memcpy(out + HDR + sizeof(uint64_t), &token, sizeof(uint64_t));
	h->bytes = (uint32_t)path_len;
	*len = at + path_len + 1;
	return 0;
}

static void free5(void *a, void *b, void *c, void *d, void *e)
{
	free(a);
	free(b);
	free(c);
	free(d);
	free(e);
}

/* Publishes the entries of s with the lengths and checksums in `at` (a
 * u64 pair per entry), each entry's result into err[] (-ECANCELED where
 * the client aborted it): all in one call to meta so that they share a
 * transaction. Each published page's name entry is queued for
 * invalidation (*ticket). The count published, or -ENOMEM (nothing
 * published, the reservations are aborted). */
static int commit_all(struct fs_mount *fs, struct fs_resvset *s, const char *at, char *err,
                      uint64_t *ticket)
{
	struct meta_resv *r = calloc(s->n ? s->n : 1, sizeof(*r));
	uint64_t *len = calloc(s->n ? s->n : 1, sizeof(*len));
	uint64_t *sum = calloc(s->n ? s->n : 1, sizeof(*sum));
	size_t *which = calloc(s->n ? s->n : 1, sizeof(*which));
	int *got = calloc(s->n ? s->n : 1, sizeof(*got));
	size_t n = 0;
	int published = 0;

	if (!r || !len || !sum || !which || !got) {
		free5(r, len, sum, which, got);
		for (size_t i = 0; i < s->n; i++)
			if (s->e[i].err == 0)
				meta_page_abort(fs->meta, &s->e[i].r);
		return -ENOMEM;
	}
	for (size_t i = 0; i < s->n; i++, at += 2 * sizeof(uint64_t)) {
		uint64_t length, checksum;
		int32_t e = s->e[i].err;

		memcpy(&length, at, sizeof(length));
		memcpy(&checksum, at + sizeof(uint64_t), sizeof(checksum));
		if (e == 0 && length == PAGEFS_IOC_ABORT) {
			meta_page_abort(fs->meta, &s->e[i].r);
			e = -ECANCELED;
		} else if (e == 0) {
			r[n] = s->e[i].r;
			len[n] = length;
			sum[n] = checksum;
			which[n++] = i;
		}
		memcpy(err + i * sizeof(e), &e, sizeof(e));
	}
	meta_page_commit_many(fs->meta, r, len, sum, n, got);
	for (size_t k = 0; k < n; k++) {
		struct meta_page_info p;
		int32_t e = got[k];

		memcpy(err + which[k] * sizeof(e), &e, sizeof(e));
		if (e != 0)
			continue;
		published++;
		meta_count_io(fs->meta, r[k].pool_id, 0, len[k]);
		if (meta_page_get(fs->meta, r[k].page_id, &p) == 0) {
			uint64_t t = fs_inval_entry(fs->inval, fs_ino_pool(p.pool_id), p.name);

			if (t)
				*ticket = t;
		}
	}
	free5(r, len, sum, which, got);
	return published;
}

int fs_batchw_commit(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id, const char *in,
                     struct pagefs_ioc_hdr *h, char *out, size_t *len)
{
	struct meta_pool_info pool;
	struct fs_resvset *s;
	uint64_t token, ticket = 0;
	int ret, published = 0;

	if (h->bytes != sizeof(uint64_t) + (size_t)h->count * 2 * sizeof(uint64_t) ||
	    HDR + (size_t)h->count * sizeof(int32_t) > PAGEFS_IOC_SIZE)
		return -EINVAL;
	memcpy(&token, in + HDR, sizeof(token));
	s = fs_dirh_take_resv(d, token);
	if (!s)
		return -EINVAL;
	if (s->n != h->count) { /* not the batch RESERVE answered: publish none of it */
		fs_resvset_abort(fs->meta, s);
		return -EINVAL;
	}
	/* --durability power: the client's bytes reach the disk before the
	 * index names them (close() syncs the same way). */
	ret = meta_pool_get(fs->meta, pool_id, &pool);
	if (ret == 0 && meta_config(fs->meta)->durability == META_DURABLE_POWER &&
	    fdatasync(pool.data_fd) < 0)
		ret = -errno;
	if (ret < 0) {
		fs_resvset_abort(fs->meta, s);
		return ret;
	}
	ret = commit_all(fs, s, in + HDR + sizeof(uint64_t), out + HDR, &ticket);
	free(s);
	if (ret < 0)
		return ret;
	published = ret > 0;
	if (published)
		fs_inval_pool(fs->inval, pool_id, 1);
	if (ticket && fs_inval_wait(fs->inval, ticket, INVAL_WAIT_MS) < 0)
		log_debug("entry invalidations of a batch commit still queued at its answer");
	h->bytes = h->count * (uint32_t)sizeof(int32_t);
	*len = HDR + h->bytes;
	return 0;
}
