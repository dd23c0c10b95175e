/*
 * pages.c - pages in the index: allocation, linking into the name and id
 * tables and the LRU, ids from blocks, and the ids of replaced pages.
 * Linking and unlinking a committed page are the only places a name
 * joins or leaves a pool's names: its presence table follows there.
 * All of it under meta.lock, none of it I/O.
 */
#include "meta/index.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* Bytes of a page of that name: the name starts in the structure's tail
 * padding, if it has any. */
static size_t page_size(size_t packed)
{
	size_t size = offsetof(struct page, packed) + packed;

	return size > sizeof(struct page) ? size : sizeof(struct page);
}

static void lru_remove(struct pool *pool, struct page *p)
{
	struct page *prev = page_at(p->lru_prev), *next = page_at(p->lru_next);

	if (prev)
		prev->lru_next = p->lru_next;
	else if (pool->lru_head == p)
		pool->lru_head = next;
	if (next)
		next->lru_prev = p->lru_prev;
	else if (pool->lru_tail == p)
		pool->lru_tail = prev;
	p->lru_prev = p->lru_next = 0;
}

/* Ids past META_PAGE_ID_MAX are none (a page keeps 48 bits). */
uint64_t index_id_left(const struct idblock *b)
{
	if (b->next > META_PAGE_ID_MAX ||
	    (b->next == b->end && b->spare_count && b->spare_first > META_PAGE_ID_MAX))
		return 0;
	return b->end - b->next + b->spare_count;
}

uint64_t index_id_take(struct idblock *b)
{
	if (!index_id_left(b))
		return 0;
	if (b->next == b->end) {
		if (!b->spare_count)
			return 0;
		b->next = b->spare_first;
		b->end = b->spare_first + b->spare_count;
		b->spare_count = 0;
	}
	return b->next++;
}

void index_lru_push_head(struct pool *pool, struct page *p)
{
	p->lru_prev = 0;
	p->lru_next = page_ref(pool->lru_head);
	if (pool->lru_head)
		pool->lru_head->lru_prev = page_ref(p);
	pool->lru_head = p;
	if (!pool->lru_tail)
		pool->lru_tail = p;
}

void index_lru_touch(struct pool *pool, struct page *p)
{
	if (pool->lru_head == p)
		return;
	lru_remove(pool, p);
	index_lru_push_head(pool, p);
}

int64_t index_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

struct page *index_page_alloc(const char *name, size_t len)
{
	struct index_pname_plan plan;
	struct page *p = index_arena_alloc(page_size(index_pname_plan(name, len, &plan)));

	if (!p)
		return NULL;
	index_pname_set(p, name, len, &plan);
	return p;
}

void index_page_free(struct page *p)
{
	if (p)
		index_arena_free(p, page_size(index_pname_stored(p)));
}

void index_page_link_committed(struct meta *m, struct page *p, uint32_t h, int64_t now_ns)
{
	index_page_link_loaded(m, p, h);
	index_lru_push_head(page_pool(p), p);
	index_pool_changed(page_pool(p), now_ns);
}

void index_page_link_loaded(struct meta *m, struct page *p, uint32_t h)
{
	struct pool *pool = page_pool(p);

	index_page_local(m, p->id);

	p->committed = 1;
	index_table_add_name(&m->by_name, p, h);
	index_presence_page(p, 1);
	index_idtable_add(&m->by_id, p);
	pool->pages++;
	pool->bytes += p->length;
	index_pool_changed(pool, page_mtime(p));
}

void index_page_replaced(struct meta *m, const struct page *p)
{
	index_page_replaced_id(m, p->id);
}

uint64_t index_feed_mark(struct meta *m)
{
	return m->local_seq;
}

void index_feed_begin(struct meta *m, uint64_t mark)
{
	m->feed_since = mark + 1;
}

void index_feed_end(struct meta *m)
{
	m->feed_since = 0;
}

/* A feed batch's own apply is not this node's change. */
void index_page_local(struct meta *m, uint64_t id)
{
	size_t n = sizeof(m->local_recent) / sizeof(m->local_recent[0]);

	if (m->feed_since)
		return;
	m->local_seq++;
	m->local_recent[m->local_seq % n].id = id;
	m->local_recent[m->local_seq % n].seq = m->local_seq;
}

int index_page_local_since(const struct meta *m, uint64_t id)
{
	size_t n = sizeof(m->local_recent) / sizeof(m->local_recent[0]);

	if (!m->feed_since)
		return 0;
	uint64_t since = m->feed_since - 1; /* the changes numbered above it */
	if (m->local_seq - since >= n)
		return -1;
	for (uint64_t s = since + 1; s <= m->local_seq; s++)
		if (m->local_recent[s % n].id == id)
			return 1;
	return 0;
}

void index_page_replaced_id(struct meta *m, uint64_t id)
{
	size_t n = sizeof(m->replaced) / sizeof(m->replaced[0]);

	m->replaced[m->replaced_n++ % n] = id;
}

/* A page takes its slot, length, checksum and times from the store's
 * row (or record), unverified until its next read. */
void index_page_take_row(struct page *p, const struct rec *r)
{
	p->slot = r->slot;
	p->length = r->length;
	p->checksum = r->checksum;
	p->has_checksum = r->has_checksum != 0;
	page_set_mtime(p, r->mtime_ns);
	p->atime_s = page_secs(r->atime_ns);
	p->verified = 0;
}

void index_page_unlink_committed(struct meta *m, struct page *p)
{
	struct pool *pool = page_pool(p);

	index_page_local(m, p->id);
	index_table_del_name(&m->by_name, p);
	index_presence_page(p, 0);
	index_idtable_del(&m->by_id, p);
	lru_remove(pool, p);
	pool->pages--;
	pool->bytes -= p->length;
	index_pool_changed(pool, index_now_ns());
	index_ctime_del(&m->ctimes, p->id);
}

void index_drops_notify(struct meta *m, struct dropped *d)
{
	index_assert_unlocked(m); /* its callback reaches fs/, which may call meta_* */
	while (d) {
		struct dropped *next = d->next;
		if (m->drop_cb)
			m->drop_cb(m->drop_arg, d->pool_id, d->page_id, d->name);
		free(d);
		d = next;
	}
}

void index_drops_add(struct dropped **list, const struct page *p)
{
	struct dropped *d = malloc(sizeof(*d) + p->name_len + 1);

	if (!d)
		return; /* only a kernel cache hint is lost */
	d->pool_id = page_pool(p)->id;
	d->page_id = p->id;
	index_pname_text(p, d->name);
	d->next = *list;
	*list = d;
}
