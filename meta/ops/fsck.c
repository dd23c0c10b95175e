/*
 * fsck.c - the offline check of an index against its data files.
 *
 * Modelled on e2fsck: a table of problems (code, message, fix) and a list
 * of passes that report them. Repairs never invent data: a page that
 * cannot be trusted is dropped, a missing checksum is computed from the
 * bytes, a missing mark or rank row is written again. Repairs go to the
 * store as ordinary records in one transaction, through the same store
 * interface the daemon uses. The check takes the index lock, so it never
 * runs beside a daemon.
 *
 * Reservations and free lists are not stored at all (free = not named by
 * a page; see docs/DESIGN.md), so "slot both used and free" and "stale
 * reservation" cannot occur; "two names on one slot" is checked here, and
 * so is "one name on two rows of a pool" (no UNIQUE index forbids it).
 */
#include "meta/log.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

enum problem {
	PR_OWNER_MISSING,
	PR_OWNER_OTHER,
	PR_POOL_BAD,
	PR_POOL_RETIRED,
	PR_RANK_MISSING,
	PR_DATA_MISSING,
	PR_DATA_SHORT,
	PR_PAGE_ORPHAN,
	PR_PAGE_SLOT,
	PR_PAGE_LENGTH,
	PR_PAGE_NAME,
	PR_PAGE_ID,
	PR_SLOT_SHARED,
	PR_NAME_SHARED,
	PR_CHECKSUM_BAD,
	PR_CHECKSUM_MISSING,
	PR_LOG_DAMAGED,
	PR_COUNT
};

static const struct {
	const char *code;
	const char *fix;
	int repairable;
} problems[PR_COUNT] = {
	[PR_OWNER_MISSING] = {"owner-missing", "write the backing directory's owner mark", 1},
	[PR_OWNER_OTHER] = {"owner-other", "check with the index that owns it (not repaired)", 0},
	[PR_POOL_BAD] = {"pool-bad", "drop the pool and its pages", 1},
	[PR_POOL_RETIRED] = {"pool-retired", "finish its removal: drop its row and data file", 1},
	[PR_RANK_MISSING] = {"rank-missing", "add the rank row", 1},
	[PR_DATA_MISSING] = {"data-missing", "drop the pool's pages and create an empty file", 1},
	[PR_DATA_SHORT] = {"data-short", "drop pages past the end and grow the file", 1},
	[PR_PAGE_ORPHAN] = {"page-orphan", "drop the page", 1},
	[PR_PAGE_SLOT] = {"page-slot-range", "drop the page", 1},
	[PR_PAGE_LENGTH] = {"page-length", "drop the page", 1},
	[PR_PAGE_NAME] = {"page-name", "drop the page", 1},
	[PR_PAGE_ID] = {"page-id", "drop the page", 1},
	[PR_SLOT_SHARED] = {"slot-shared", "keep the one page whose bytes match its checksum", 1},
	[PR_NAME_SHARED] = {"name-shared", "keep the row with the highest id, drop the others", 1},
	[PR_CHECKSUM_BAD] = {"checksum-bad", "drop the page", 1},
	[PR_CHECKSUM_MISSING] = {"checksum-missing", "compute it from the bytes", 1},
	[PR_LOG_DAMAGED] = {"log-damaged", "drop the record: its pages are lost, their slots free",
                            1},
};

struct fpool {
	struct store_pool_row row;
	char path[4096];
	int fd;
	int bad;
	int retired; /* a shared index's removal stopped half way: finish it */
	uint64_t file_size;
};

struct fpage {
	struct rec *row; /* owned */
	int drop;
	int name_dup; /* dropped as an older row of a shared name: holds no slot */
};

struct fsck {
	const struct meta_fsck_opts *o;
	struct meta_fsck_result *res;
	struct store *store;
	char backing[4096];
	char prefix[256];
	struct fpool *pools;
	size_t npools;
	struct fpage *pages;
	size_t npages, cap;
	uint8_t ranks[(META_RANK_MAX + 1) / 8];
	struct rec *fixes, **fixes_tail; /* repairs, in order */
};

static void report(struct fsck *f, enum problem pr, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

static void report(struct fsck *f, enum problem pr, const char *fmt, ...)
{
	char what[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(what, sizeof(what), fmt, ap);
	va_end(ap);
	f->res->problems++;
	int fixed = f->o->repair && problems[pr].repairable;
	if (fixed)
		f->res->repaired++;
	if (f->o->report)
		f->o->report(f->o->arg, problems[pr].code, what, problems[pr].fix, fixed);
}

static void progress(struct fsck *f, const char *pass, uint64_t done, uint64_t total)
{
	if (f->o->progress)
		f->o->progress(f->o->arg, pass, done, total);
}

static void add_fix(struct fsck *f, struct rec *r)
{
	if (!r)
		return;
	*f->fixes_tail = r;
	f->fixes_tail = &r->next;
}

static void drop_page(struct fsck *f, struct fpage *p)
{
	if (p->drop)
		return;
	p->drop = 1;
	struct rec *r = record_new(REC_DROP);
	if (r) {
		r->page_id = p->row->page_id;
		r->pool_id = p->row->pool_id;
	}
	add_fix(f, r);
}

static struct fpool *find_pool(struct fsck *f, uint32_t id)
{
	for (size_t i = 0; i < f->npools; i++)
		if (f->pools[i].row.id == id)
			return &f->pools[i];
	return NULL;
}

static int on_rank(void *arg, int rank)
{
	struct fsck *f = arg;

	if (rank >= 0 && rank <= META_RANK_MAX)
		f->ranks[rank / 8] |= (uint8_t)(1u << (rank % 8));
	return 0;
}

static int on_pool(void *arg, const struct store_pool_row *row)
{
	struct fsck *f = arg;
	struct fpool *n = realloc(f->pools, (f->npools + 1) * sizeof(*n));

	if (!n)
		return -ENOMEM;
	f->pools = n;
	memset(&n[f->npools], 0, sizeof(*n));
	n[f->npools].row = *row;
	n[f->npools].fd = -1;
	f->npools++;
	return 0;
}

static int on_page(void *arg, const struct rec *row)
{
	struct fsck *f = arg;

	if (f->npages == f->cap) {
		size_t cap = f->cap ? f->cap * 2 : 1024;
		struct fpage *n = realloc(f->pages, cap * sizeof(*n));
		if (!n)
			return -ENOMEM;
		f->pages = n;
		f->cap = cap;
	}
	struct rec *copy = malloc(sizeof(*copy));
	if (!copy)
		return -ENOMEM;
	*copy = *row;
	f->pages[f->npages++] = (struct fpage){copy, 0, 0};
	if (f->npages % 100000 == 0)
		progress(f, "load", f->npages, 0);
	return 0;
}

/* A record of the SQLite index's page log that does not decode: its
 * pages cannot be read, so none is loaded and the repair drops it. */
static int on_log_damaged(void *arg, int64_t seq, const char *why)
{
	struct fsck *f = arg;
	struct rec *r = record_new(REC_LOG_DROP);

	report(f, PR_LOG_DAMAGED, "page log record %lld: %s", (long long)seq, why);
	if (!r)
		return -ENOMEM;
	r->page_id = (uint64_t)seq;
	add_fix(f, r);
	return 0;
}

static void pass_owner(struct fsck *f)
{
	char mine[64] = "", theirs[64] = "";

	if (store_get_setting(f->store, "index_id", mine, sizeof(mine)) < 0)
		return; /* a fresh index has no id until its first mount */
	if (store_read_owner(f->backing, theirs, sizeof(theirs)) < 0) {
		report(f, PR_OWNER_MISSING, "%s/%s is missing (index id %s)", f->backing,
		       OWNER_FILE, mine);
		if (f->o->repair)
			store_write_owner(f->backing, f->o->uri, mine);
	} else if (strcmp(mine, theirs) != 0) {
		report(f, PR_OWNER_OTHER, "%s belongs to index %s, this index is %s", f->backing,
		       theirs, mine);
	}
}

static void pass_pools(struct fsck *f)
{
	for (size_t i = 0; i < f->npools; i++) {
		struct fpool *p = &f->pools[i];
		struct stat st;

		if (p->row.retired && meta_check_ns(p->row.ns) == 0 &&
		    record_data_path_of(f->backing, f->prefix, p->row.rank, p->row.ns, p->path,
		                        sizeof(p->path)) == 0) {
			/* A node removing it (pool.c) stopped between retiring
			 * its row and deleting it: the pool is gone everywhere,
			 * but the row keeps its name from being made again. */
			p->bad = p->retired = 1;
			report(f, PR_POOL_RETIRED, "pool %u (%u/%s) was being removed", p->row.id,
			       p->row.rank, p->row.ns);
			struct rec *r = record_new(REC_POOL_DEL);
			if (r)
				r->pool_id = p->row.id;
			add_fix(f, r);
			continue;
		}
		if (p->row.slot_size == 0 || p->row.capacity == 0 || meta_check_ns(p->row.ns) < 0 ||
		    record_data_path_of(f->backing, f->prefix, p->row.rank, p->row.ns, p->path,
		                        sizeof(p->path)) < 0) {
			p->bad = 1;
			report(f, PR_POOL_BAD, "pool %u (%u/%s) has slot size %llu, capacity %llu",
			       p->row.id, p->row.rank, p->row.ns,
			       (unsigned long long)p->row.slot_size,
			       (unsigned long long)p->row.capacity);
			struct rec *r = record_new(REC_POOL_DEL);
			if (r)
				r->pool_id = p->row.id;
			add_fix(f, r);
			continue;
		}
		if (!(f->ranks[p->row.rank / 8] & (1u << (p->row.rank % 8)))) {
			report(f, PR_RANK_MISSING, "rank %u of pool %u/%s has no row", p->row.rank,
			       p->row.rank, p->row.ns);
			struct rec *r = record_new(REC_RANK_PUT);
			if (r)
				r->rank = p->row.rank;
			add_fix(f, r);
			f->ranks[p->row.rank / 8] |= (uint8_t)(1u << (p->row.rank % 8));
		}
		if (stat(p->path, &st) < 0) {
			p->file_size = UINT64_MAX; /* marks "missing" for pass_pages */
			continue;
		}
		p->file_size = (uint64_t)st.st_size;
		p->fd = open(p->path, O_RDONLY | O_CLOEXEC);
	}
}

static int cmp_slot(const void *a, const void *b)
{
	const struct rec *x = ((const struct fpage *)a)->row, *y = ((const struct fpage *)b)->row;

	if (x->pool_id != y->pool_id)
		return x->pool_id < y->pool_id ? -1 : 1;
	if (x->slot != y->slot)
		return x->slot < y->slot ? -1 : 1;
	return x->page_id < y->page_id ? -1 : (x->page_id > y->page_id);
}

/* 1: the bytes match the stored checksum, 0: they do not or cannot be read. */
static int bytes_match(struct fpool *p, const struct rec *r, uint64_t *sum)
{
	if (p->fd < 0 || meta_checksum_range(p->fd, r->slot * p->row.slot_size, r->length, sum) < 0)
		return 0;
	return r->has_checksum && *sum == r->checksum;
}

static void pass_pages(struct fsck *f)
{
	uint64_t missing_reported = UINT64_MAX;

	for (size_t i = 0; i < f->npages; i++) {
		struct fpage *pg = &f->pages[i];
		struct rec *r = pg->row;
		struct fpool *p = find_pool(f, r->pool_id);

		if (!p || p->bad) {
			report(f, PR_PAGE_ORPHAN, "page '%s' (id %llu) names pool %u, which %s",
			       r->name, (unsigned long long)r->page_id, r->pool_id,
			       p ? "is bad" : "does not exist");
			drop_page(f, pg);
		} else if (meta_check_name(r->name) < 0 || strlen(r->name) != r->name_len) {
			report(f, PR_PAGE_NAME, "page %llu of pool %u/%s has an invalid name",
			       (unsigned long long)r->page_id, p->row.rank, p->row.ns);
			drop_page(f, pg);
		} else if (!r->page_id || r->page_id > META_PAGE_ID_MAX) {
			report(f, PR_PAGE_ID, "page '%s' of pool %u/%s has id %llu, out of 1..%llu",
			       r->name, p->row.rank, p->row.ns, (unsigned long long)r->page_id,
			       (unsigned long long)META_PAGE_ID_MAX);
			drop_page(f, pg);
		} else if (r->slot >= p->row.capacity) {
			report(f, PR_PAGE_SLOT,
			       "page '%s' of pool %u/%s is at slot %llu, capacity %llu", r->name,
			       p->row.rank, p->row.ns, (unsigned long long)r->slot,
			       (unsigned long long)p->row.capacity);
			drop_page(f, pg);
		} else if (r->length > p->row.slot_size) {
			report(f, PR_PAGE_LENGTH,
			       "page '%s' of pool %u/%s is %llu bytes, slot size %llu", r->name,
			       p->row.rank, p->row.ns, (unsigned long long)r->length,
			       (unsigned long long)p->row.slot_size);
			drop_page(f, pg);
		} else if (p->file_size == UINT64_MAX) {
			if (missing_reported != p->row.id)
				report(f, PR_DATA_MISSING, "data file %s of pool %u/%s is missing",
				       p->path, p->row.rank, p->row.ns);
			missing_reported = p->row.id;
			drop_page(f, pg);
		} else if (r->slot * p->row.slot_size + r->length > p->file_size) {
			report(f, PR_DATA_SHORT, "page '%s' lies past the end of %s (%llu bytes)",
			       r->name, p->path, (unsigned long long)p->file_size);
			drop_page(f, pg);
		}
	}
}

/* Rows dropped as older duplicates of a name sort last, out of the slot
 * groups: their slots are free once the repair drops them. */
static int cmp_slot_live(const void *a, const void *b)
{
	const struct fpage *x = a, *y = b;

	if (x->name_dup != y->name_dup)
		return x->name_dup - y->name_dup;
	return cmp_slot(a, b);
}

static int cmp_name(const void *a, const void *b)
{
	const struct rec *x = ((const struct fpage *)a)->row, *y = ((const struct fpage *)b)->row;

	if (x->pool_id != y->pool_id)
		return x->pool_id < y->pool_id ? -1 : 1;
	if (x->name_len != y->name_len)
		return x->name_len < y->name_len ? -1 : 1;
	int c = memcmp(x->name, y->name, x->name_len);
	if (c)
		return c;
	return x->page_id < y->page_id ? -1 : (x->page_id > y->page_id);
}

static int same_name(const struct rec *x, const struct rec *y)
{
	return x->pool_id == y->pool_id && x->name_len == y->name_len &&
	       memcmp(x->name, y->name, x->name_len) == 0;
}

/* Two rows of one pool with one name: only a bug can write them (the store
 * replaces a page by id). The highest id is kept; the older rows go. Rows
 * pass_pages dropped already are not counted. */
static void pass_shared_names(struct fsck *f)
{
	size_t nlive = 0;

	/* Rows already dropped sort after the live ones, out of the groups. */
	for (size_t i = 0; i < f->npages; i++) {
		if (!f->pages[i].drop) {
			struct fpage t = f->pages[nlive];
			f->pages[nlive++] = f->pages[i];
			f->pages[i] = t;
		}
	}
	if (nlive > 1)
		qsort(f->pages, nlive, sizeof(*f->pages), cmp_name);
	for (size_t i = 0; i < nlive;) {
		size_t j = i + 1;
		while (j < nlive && same_name(f->pages[j].row, f->pages[i].row))
			j++;
		if (j - i > 1) {
			struct fpool *p = find_pool(f, f->pages[i].row->pool_id);
			const struct rec *kept = f->pages[j - 1].row; /* sorted by id */
			for (size_t k = i; k + 1 < j; k++) {
				report(f, PR_NAME_SHARED,
				       "page '%s' of pool %u/%s has %zu rows: id %llu dropped, "
				       "id %llu kept",
				       kept->name, p ? p->row.rank : 0, p ? p->row.ns : "?", j - i,
				       (unsigned long long)f->pages[k].row->page_id,
				       (unsigned long long)kept->page_id);
				drop_page(f, &f->pages[k]);
				f->pages[k].name_dup = 1;
			}
		}
		i = j;
	}
}

static void pass_shared_slots(struct fsck *f)
{
	size_t nslot = f->npages;

	if (f->npages > 1) /* pages is NULL for an index without pages */
		qsort(f->pages, f->npages, sizeof(*f->pages), cmp_slot_live);
	while (nslot > 0 && f->pages[nslot - 1].name_dup)
		nslot--;
	for (size_t i = 0; i < nslot;) {
		size_t j = i + 1;
		while (j < nslot && f->pages[j].row->pool_id == f->pages[i].row->pool_id &&
		       f->pages[j].row->slot == f->pages[i].row->slot)
			j++;
		if (j - i > 1) {
			struct fpool *p = find_pool(f, f->pages[i].row->pool_id);
			size_t keep = SIZE_MAX, matches = 0;
			for (size_t k = i; k < j; k++) {
				uint64_t sum;
				if (p && !f->pages[k].drop &&
				    bytes_match(p, f->pages[k].row, &sum)) {
					keep = k;
					matches++;
				}
			}
			for (size_t k = i; k < j; k++) {
				if (matches == 1 && k == keep)
					continue;
				report(f, PR_SLOT_SHARED,
				       "page '%s' shares slot %llu of pool %u with %zu "
				       "other page(s)",
				       f->pages[k].row->name,
				       (unsigned long long)f->pages[k].row->slot,
				       f->pages[k].row->pool_id, j - i - 1);
				drop_page(f, &f->pages[k]);
			}
		}
		i = j;
	}
}

static void pass_checksums(struct fsck *f)
{
	for (size_t i = 0; i < f->npages; i++) {
		struct fpage *pg = &f->pages[i];
		struct fpool *p = find_pool(f, pg->row->pool_id);
		uint64_t sum = 0;

		if (i % 1024 == 0)
			progress(f, "verify", i, f->npages);
		if (pg->drop || !p)
			continue;
		if (bytes_match(p, pg->row, &sum))
			continue;
		if (pg->row->has_checksum || p->fd < 0) {
			report(f, PR_CHECKSUM_BAD,
			       "page '%s' of pool %u/%s does not match its checksum", pg->row->name,
			       p->row.rank, p->row.ns);
			drop_page(f, pg);
			continue;
		}
		report(f, PR_CHECKSUM_MISSING, "page '%s' of pool %u/%s has no checksum",
		       pg->row->name, p->row.rank, p->row.ns);
		struct rec *r = malloc(sizeof(*r));
		if (r) {
			*r = *pg->row;
			r->type = REC_COMMIT;
			r->next = NULL;
			r->checksum = sum;
			r->has_checksum = 1;
		}
		add_fix(f, r);
	}
	progress(f, "verify", f->npages, f->npages);
}

static int apply_fixes(struct fsck *f, char *err, size_t errlen)
{
	int rc = store_begin(f->store);

	for (struct rec *r = f->fixes; r && rc == 0; r = r->next)
		rc = store_apply(f->store, r);
	if (rc == 0)
		rc = store_commit(f->store);
	if (rc < 0) {
		store_rollback(f->store);
		snprintf(err, errlen, "repair failed, index left as it was: %s", strerror(-rc));
		return rc;
	}
	/* Data files of pools that keep pages must cover their capacity; a
	 * removed pool's file goes (no daemon runs: nobody can have made the
	 * name again, its row held it). */
	for (size_t i = 0; i < f->npools; i++) {
		struct fpool *p = &f->pools[i];
		int fd;
		if (p->retired && unlink(p->path) < 0 && errno != ENOENT)
			log_warn("cannot remove %s: %s", p->path, strerror(errno));
		if (!p->bad && record_data_open(p->path, p->row.capacity * p->row.slot_size, 0, &fd,
		                                NULL) == 0)
			close(fd);
	}
	return 0;
}

static void fsck_free(struct fsck *f)
{
	for (size_t i = 0; i < f->npools; i++)
		if (f->pools[i].fd >= 0)
			close(f->pools[i].fd);
	for (size_t i = 0; i < f->npages; i++)
		free(f->pages[i].row);
	while (f->fixes) {
		struct rec *n = f->fixes->next;
		free(f->fixes);
		f->fixes = n;
	}
	free(f->pools);
	free(f->pages);
	store_close(f->store);
}

/*
 * Whether the backing directory looks like this index's: it has the
 * owner mark, or one of the index's data files, or the index has no pool.
 * A repair of another directory (the shared filesystem not mounted, a
 * typo) would drop every page as "data missing" and claim the directory.
 */
static int backing_is_ours(const struct fsck *f)
{
	char id[64], mine[64] = "";

	if (f->npools == 0)
		return 1;
	if (store_read_owner(f->backing, id, sizeof(id)) == 0 &&
	    (store_get_setting(f->store, "index_id", mine, sizeof(mine)) < 0 ||
	     strcmp(id, mine) == 0)) /* (a fresh index has no id yet) */
		return 1;
	/* No mark, or another index's (owner-other, never repaired): the
	 * data files tell. */
	for (size_t i = 0; i < f->npools; i++) {
		const struct fpool *p = &f->pools[i];
		char path[4096];
		if (!p->row.retired && meta_check_ns(p->row.ns) == 0 &&
		    record_data_path_of(f->backing, f->prefix, p->row.rank, p->row.ns, path,
		                        sizeof(path)) == 0 &&
		    access(path, F_OK) == 0)
			return 1;
	}
	return 0;
}

int meta_fsck(const struct meta_fsck_opts *o, struct meta_fsck_result *res, char *err,
              size_t errlen)
{
	struct fsck f = {.o = o, .res = res};
	struct store_uri u;
	int rc;

	*res = (struct meta_fsck_result){0};
	f.fixes_tail = &f.fixes;
	err[0] = '\0';
	if ((rc = store_parse_uri(o->uri, &u, err, errlen)) < 0)
		return rc;
	if (u.engine == STORE_SQLITE && access(u.target, F_OK) < 0) {
		snprintf(err, errlen, "index %s does not exist; check --meta", u.target);
		return -ENOENT;
	}
	struct stat bst;
	if (!realpath(o->backing, f.backing)) {
		snprintf(err, errlen, "backing directory %s: %s", o->backing, strerror(errno));
		return -ENOENT;
	}
	if (stat(f.backing, &bst) < 0 || !S_ISDIR(bst.st_mode)) {
		snprintf(err, errlen, "backing directory %s is not a directory", o->backing);
		return -ENOTDIR;
	}
	rc = store_open(o->uri, 0, !o->repair, &f.store, err, errlen);
	if (rc < 0 || (rc = store_lock(f.store, 1, err, errlen)) < 0)
		goto out;
	if (store_get_setting(f.store, "prefix", f.prefix, sizeof(f.prefix)) < 0)
		snprintf(f.prefix, sizeof(f.prefix), "hicache");
	struct store_load_cb cb = {&f, on_rank, on_pool, on_page, on_log_damaged};
	if ((rc = store_load(f.store, &cb, err, errlen)) < 0)
		goto out;
	res->pools = f.npools;
	res->pages = f.npages;
	if (o->repair && !backing_is_ours(&f)) {
		snprintf(err, errlen,
		         "%s has neither the owner mark of this index nor any of its %zu pools' "
		         "data files: it does not look like this index's backing directory (is "
		         "its filesystem mounted?). Nothing was repaired; run without --repair "
		         "to see the problems",
		         f.backing, f.npools);
		rc = -ENOENT;
		goto out;
	}
	pass_owner(&f);
	pass_pools(&f);
	pass_pages(&f);
	pass_shared_names(&f);
	pass_shared_slots(&f);
	if (o->verify_data)
		pass_checksums(&f);
	if (o->repair && f.fixes)
		rc = apply_fixes(&f, err, errlen);
out:
	fsck_free(&f); /* closes the store and its lock */
	return rc;
}
