/*
 * idsegs.c - the table by id's direct part: pages whose ids were handed
 * out after the index loaded, in arrays of page references indexed by id
 * ("segments" of SEG consecutive ids), in front of the hashed buckets of
 * idtable.c.
 *
 * Ids are handed out in increasing order from blocks (index_id_take), so
 * the pages a confirm links take consecutive ids. Hashed, each took a
 * bucket on a line of its own among tens of MiB, a cache miss and on a
 * virtual machine a TLB miss too; here a batch of them fills one or two
 * runs of adjacent entries. The ids loaded at mount stay hashed: after a
 * long churn they are sparse, and a direct array would cost memory for
 * every id between them.
 *
 * A segment is made when a page of an id at or above the floor (the
 * highest id loaded, plus 1) is linked and its range has none; it takes
 * 4 bytes an id of its range (16 KiB). Once a page of one of its last
 * SEG / 16 ids was linked ("passed") and deletions leave fewer than half
 * its ids live, its live pages move to the hashed buckets and the segment
 * is freed: a passed segment costs at most 8 bytes a live page (the
 * hashed buckets 5). Its range is then marked moved, so that its ids stay
 * hashed. A range never passed keeps its segment while it holds pages.
 *
 * The directory maps a range (id / SEG) to its segment or to "moved",
 * by open addressing. Segments are made only for ranges at most WINDOW
 * ranges below the highest that has had one (several nodes' blocks of a
 * shared index take turns that far apart), so a moved range further down
 * can never take a segment again, and its entry is dropped when the
 * directory is rebuilt (at half full, to a quarter): it holds about the
 * live segments and WINDOW entries more, twice that at most, however many
 * ids were ever handed out. Callers hold meta.lock, or are the load's one
 * linker thread.
 */
#include "meta/hash.h"
#include "meta/index.h"

#include <errno.h>
#include <stdlib.h>

#define SEG_SHIFT 12
#define SEG ((uint64_t)1 << SEG_SHIFT)
#define PASSED (SEG - SEG / 16) /* an entry past this: the range was passed */
#define WINDOW ((uint64_t)4096) /* ranges below the top that take segments (16M ids) */

struct idseg {
	uint32_t live;   /* entries set */
	uint32_t passed; /* an entry at or past PASSED was ever set */
	uint32_t refs[SEG];
};

#define MOVED ((struct idseg *)1)

struct idsegs_dir {
	uint64_t key;      /* range + 1; 0: an empty entry */
	struct idseg *seg; /* or MOVED */
};

struct idsegs {
	uint64_t floor;  /* ids below it are hashed; UINT64_MAX before the seal */
	uint64_t id_max; /* the highest id linked so far */
	uint64_t live;   /* pages in segments */
	struct idsegs_dir *dir;
	uint64_t mask, used;     /* directory: size - 1, entries used */
	uint64_t top;            /* the highest range that had a segment, + 1; 0: none */
	struct idsegs_dir *last; /* the entry found last (the stream's, mostly) */
};

int index_idsegs_init(struct idsegs **out)
{
	struct idsegs *s = calloc(1, sizeof(*s));

	if (!s)
		return -ENOMEM;
	s->floor = UINT64_MAX;
	*out = s;
	return 0;
}

void index_idsegs_seal(struct idsegs *s)
{
	s->floor = s->id_max + 1;
}

uint64_t index_idsegs_live(const struct idsegs *s)
{
	return s ? s->live : 0;
}

uint64_t index_idsegs_ranges(const struct idsegs *s)
{
	return s ? s->used : 0;
}

/* The directory entry of range r, or NULL. */
static struct idsegs_dir *dir_find(const struct idsegs *s, uint64_t r)
{
	if (s->last && s->last->key == r + 1)
		return s->last;
	if (!s->dir)
		return NULL;
	for (uint64_t i = meta_mix64(r) & s->mask;; i = (i + 1) & s->mask) {
		if (s->dir[i].key == r + 1)
			return &s->dir[i];
		if (!s->dir[i].key)
			return NULL;
	}
}

static struct idsegs_dir *dir_put(struct idsegs_dir *dir, uint64_t mask, uint64_t key,
                                  struct idseg *seg)
{
	uint64_t i = meta_mix64(key - 1) & mask;

	while (dir[i].key)
		i = (i + 1) & mask;
	dir[i] = (struct idsegs_dir){key, seg};
	return &dir[i];
}

/* Whether range r may take a segment: within WINDOW of the top. */
static int in_window(const struct idsegs *s, uint64_t r)
{
	return r + 1 + WINDOW >= s->top;
}

/* Whether an entry stays in a rebuilt directory: a segment, or a moved
 * range that could still take one. */
static int kept(const struct idsegs *s, const struct idsegs_dir *e)
{
	return e->key && (e->seg != MOVED || in_window(s, e->key - 1));
}

/* Rebuilds the directory without the entries no longer kept, at most a
 * quarter full. -ENOMEM leaves it as it was. */
static int dir_rebuild(struct idsegs *s)
{
	uint64_t keep = 0, size = 64;

	for (uint64_t i = 0; s->dir && i <= s->mask; i++)
		keep += (uint64_t)kept(s, &s->dir[i]);
	while ((keep + 1) * 4 > size)
		size *= 2;
	struct idsegs_dir *d = calloc(size, sizeof(*d));
	if (!d)
		return -ENOMEM;
	for (uint64_t i = 0; s->dir && i <= s->mask; i++)
		if (kept(s, &s->dir[i]))
			dir_put(d, size - 1, s->dir[i].key, s->dir[i].seg);
	free(s->dir);
	s->dir = d;
	s->mask = size - 1;
	s->used = keep;
	s->last = NULL;
	return 0;
}

/* A new entry for range r (not in the directory). NULL on ENOMEM. */
static struct idsegs_dir *dir_add(struct idsegs *s, uint64_t r, struct idseg *seg)
{
	if ((!s->dir || (s->used + 1) * 2 > s->mask + 1) && dir_rebuild(s) < 0)
		return NULL;
	s->used++;
	return s->last = dir_put(s->dir, s->mask, r + 1, seg);
}

/* The segment of id, or NULL (none, or its range moved). */
static struct idseg *seg_of(const struct idsegs *s, uint64_t id)
{
	struct idsegs_dir *e = dir_find(s, id >> SEG_SHIFT);

	return e && e->seg != MOVED ? e->seg : NULL;
}

struct page *index_idsegs_find(const struct idsegs *s, uint64_t id)
{
	struct idseg *g = s ? seg_of(s, id) : NULL;

	return g ? page_at(g->refs[id & (SEG - 1)]) : NULL;
}

const void *index_idsegs_entry(const struct idsegs *s, uint64_t id)
{
	struct idseg *g = s ? seg_of(s, id) : NULL;

	return g ? &g->refs[id & (SEG - 1)] : NULL;
}

int index_idsegs_add(struct idsegs *s, struct page *p)
{
	uint64_t id = p->id, r = id >> SEG_SHIFT;

	if (!s)
		return 0;
	if (id > s->id_max)
		s->id_max = id;
	struct idsegs_dir *e = dir_find(s, r);
	if (!e) {
		if (id < s->floor || !in_window(s, r))
			return 0;
		struct idseg *g = calloc(1, sizeof(*g));
		if (!g)
			return 0; /* hashed instead */
		if (!(e = dir_add(s, r, g))) {
			free(g);
			return 0;
		}
		if (r + 1 > s->top)
			s->top = r + 1;
	}
	if (e->seg == MOVED)
		return 0;
	s->last = e;
	uint32_t *ref = &e->seg->refs[id & (SEG - 1)];
	if (*ref)
		return 0; /* (an id is linked once; hashed if ever twice) */
	*ref = page_ref(p);
	e->seg->live++;
	e->seg->passed |= (id & (SEG - 1)) >= PASSED;
	s->live++;
	return 1;
}

int index_idsegs_del(struct idsegs *s, struct page *p, void (*rehash)(void *, struct page *),
                     void *arg)
{
	struct idsegs_dir *e = s ? dir_find(s, p->id >> SEG_SHIFT) : NULL;

	if (!e || e->seg == MOVED)
		return 0;
	struct idseg *g = e->seg;
	uint32_t *ref = &g->refs[p->id & (SEG - 1)];
	if (*ref != page_ref(p))
		return 0;
	*ref = 0;
	g->live--;
	s->live--;
	if (!g->passed || (uint64_t)g->live * 2 >= SEG)
		return 1;
	/* Half empty and passed: its pages go to the hashed buckets, one by
	 * one (each counted there before it is placed: they grow as needed). */
	e->seg = MOVED;
	for (uint64_t i = 0; i < SEG && g->live; i++)
		if (g->refs[i]) {
			g->live--;
			s->live--;
			rehash(arg, page_at(g->refs[i]));
		}
	free(g);
	return 1;
}

void index_idsegs_free(struct idsegs *s, int free_pages)
{
	if (!s)
		return;
	for (uint64_t i = 0; s->dir && i <= s->mask; i++) {
		struct idseg *g = s->dir[i].seg;
		if (!s->dir[i].key || g == MOVED)
			continue;
		for (uint64_t j = 0; free_pages && j < SEG && g->live; j++)
			if (g->refs[j]) {
				index_page_free(page_at(g->refs[j]));
				g->live--;
			}
		free(g);
	}
	free(s->dir);
	free(s);
}
