/*
 * test_recovery.c - what survives meta_close, a crash and a bad index.
 *
 * Crashes are real: a child process opens the index, commits and
 * reserves, then leaves by _exit(0) or SIGKILL without meta_close; the
 * test process reopens the index afterwards. The child reports through
 * its exit status only (a Criterion assertion cannot fire there), and the
 * test process never has the engine open across a fork().
 */
#include "fixture.h"

#include <fcntl.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdlib.h>
#include <sys/wait.h>

TestSuite(recovery, .init = fx_init_dirs, .fini = fx_teardown, .timeout = 60);

#define CHILD_PENDING 3
#define CHILD_COMMITS 5

/* ---- helpers ---- */

static int open_fails(char *err, size_t len)
{
	struct meta *m = NULL;
	int ret;

	err[0] = '\0';
	ret = meta_open(&fx.cfg, &m, err, len);
	if (ret == 0)
		meta_close(m);
	cr_assert_lt(ret, 0, "meta_open of %s on %s succeeded, want a refusal", fx.cfg.uri,
	             fx.cfg.backing);
	cr_assert_null(m, "failed meta_open left a handle");
	cr_assert_neq(err[0], '\0', "meta_open failed (%s) without a message", strerror(-ret));
	return ret;
}

static void assert_mentions(const char *err, const char *what)
{
	cr_assert_not_null(strstr(err, what), "message does not mention \"%s\": %s", what, err);
}

/* Reads a whole file into a malloc'd buffer. */
static char *slurp(const char *path, size_t *len)
{
	struct stat st;
	char *buf;
	int fd = open(path, O_RDONLY);

	cr_assert_geq(fd, 0, "open %s: %s", path, strerror(errno));
	cr_assert_eq(fstat(fd, &st), 0, "fstat %s: %s", path, strerror(errno));
	buf = malloc((size_t)st.st_size + 1);
	cr_assert_not_null(buf, "malloc");
	cr_assert_eq(read(fd, buf, (size_t)st.st_size), st.st_size, "read %s", path);
	close(fd);
	*len = (size_t)st.st_size;
	return buf;
}

static void write_file(const char *path, const void *buf, size_t len)
{
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);

	cr_assert_geq(fd, 0, "create %s: %s", path, strerror(errno));
	cr_assert_eq(write(fd, buf, len), (ssize_t)len, "write %s: %s", path, strerror(errno));
	close(fd);
}

static void sql_exec(const char *path, const char *sql, int want_changes)
{
	sqlite3 *db = NULL;
	char *msg = NULL;
	int rc = sqlite3_open(path, &db);

	cr_assert_eq(rc, SQLITE_OK, "sqlite3_open %s: %s", path, sqlite3_errstr(rc));
	rc = sqlite3_exec(db, sql, NULL, NULL, &msg);
	cr_assert_eq(rc, SQLITE_OK, "%s: %s", sql, msg ? msg : sqlite3_errstr(rc));
	if (want_changes >= 0)
		cr_assert_eq(sqlite3_changes(db), want_changes, "%s changed %d rows, want %d", sql,
		             sqlite3_changes(db), want_changes);
	sqlite3_close(db);
}

static void remove_sidecars(const char *db)
{
	char path[600];

	snprintf(path, sizeof(path), "%s-wal", db);
	unlink(path);
	snprintf(path, sizeof(path), "%s-shm", db);
	unlink(path);
}

static void assert_same_page(const struct meta_page_info *want)
{
	struct meta_page_info p = lookup_ok(fx.pool, want->name);

	cr_assert_eq(p.id, want->id, "%s: id %llu, was %llu", want->name, (unsigned long long)p.id,
	             (unsigned long long)want->id);
	cr_assert_eq(p.slot, want->slot, "%s: slot %llu, was %llu", want->name,
	             (unsigned long long)p.slot, (unsigned long long)want->slot);
	cr_assert_eq(p.length, want->length, "%s: length %llu, was %llu", want->name,
	             (unsigned long long)p.length, (unsigned long long)want->length);
	cr_assert_eq(p.has_checksum, want->has_checksum, "%s: has_checksum changed", want->name);
	cr_assert_eq(p.checksum, want->checksum, "%s: checksum %llx, was %llx", want->name,
	             (unsigned long long)p.checksum, (unsigned long long)want->checksum);
	cr_assert_eq(p.mtime_ns, want->mtime_ns, "%s: mtime %lld, was %lld", want->name,
	             (long long)p.mtime_ns, (long long)want->mtime_ns);
	cr_assert_eq(p.gen, want->gen, "%s: gen %u, was %u", want->name, p.gen, want->gen);
}

/* An index with pool 0/kv and pages before-0..3, closed again. */
static void make_index(struct meta_page_info before[4])
{
	fx_open();
	fx_setup_pool();
	for (int i = 0; i < 4; i++) {
		char name[32];

		snprintf(name, sizeof(name), "before-%d", i);
		before[i] = put_page(fx.pool, name, 500 + (uint64_t)i, 0xb000 + (uint64_t)i);
	}
	fx_close();
}

/*
 * The crashing child: opens the index, leaves CHILD_PENDING reservations
 * and one O_TRUNC replacement uncommitted, commits CHILD_COMMITS pages,
 * unlinks before-1, renames before-2 to "renamed", then dies without
 * meta_close. Exit codes 10.. name the step that failed.
 */
static void crash_child(int fd, int sigkill)
{
	struct meta *m = NULL;
	struct meta_pool_info pi;
	struct meta_page_info b3;
	struct meta_resv r;
	char err[512], name[32];
	int pending;

	if (meta_open(&fx.cfg, &m, err, sizeof(err)) < 0)
		_exit(10);
	if (meta_pool_find(m, 0, "kv", &pi) < 0)
		_exit(11);
	for (int i = 0; i < CHILD_PENDING; i++) {
		snprintf(name, sizeof(name), "pending-%d", i);
		if (meta_page_reserve(m, pi.id, name, 0, &r) < 0)
			_exit(12);
	}
	if (meta_page_lookup(m, pi.id, "before-3", &b3, &pending) < 0 ||
	    meta_page_reserve(m, pi.id, "before-3", b3.id, &r) < 0)
		_exit(13);
	for (int i = 0; i < CHILD_COMMITS; i++) {
		snprintf(name, sizeof(name), "after-%d", i);
		if (meta_page_reserve(m, pi.id, name, 0, &r) < 0)
			_exit(14);
		if (meta_page_commit(m, &r, 1000 + (uint64_t)i, 0x5000 + (uint64_t)i) < 0)
			_exit(15);
	}
	if (meta_page_unlink(m, pi.id, "before-1") < 0)
		_exit(16);
	if (meta_page_rename(m, pi.id, "before-2", "renamed", 0) < 0)
		_exit(17);
	if (write(fd, "ok", 2) != 2)
		_exit(18);
	if (sigkill)
		raise(SIGKILL);
	_exit(0);
}

static void crash_and_check(int sigkill)
{
	struct meta_page_info before[4];
	int fds[2], status;
	char buf[8] = "";

	make_index(before);
	cr_assert_eq(pipe(fds), 0, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		close(fds[0]);
		crash_child(fds[1], sigkill);
	}
	close(fds[1]);
	ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
	close(fds[0]);
	cr_assert_eq(waitpid(pid, &status, 0), pid, "waitpid: %s", strerror(errno));
	if (WIFEXITED(status))
		cr_assert_eq(WEXITSTATUS(status), 0, "child failed at step %d (see crash_child)",
		             WEXITSTATUS(status));
	cr_assert(n == 2 && strcmp(buf, "ok") == 0, "child did not finish its work");
	if (sigkill)
		cr_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL,
		          "child was not killed");

	/* Reopen with eviction off, so a leaked slot shows up as ENOSPC. */
	fx.cfg.evict = META_EVICT_NONE;
	fx_open();
	struct meta_pool_info pi;
	int ret = meta_pool_find(fx.m, 0, "kv", &pi);
	cr_assert_eq(ret, 0, "pool 0/kv after the crash: %s", strerror(-ret));
	fx.pool = pi.id;

	assert_same_page(&before[0]);
	cr_assert_eq(lookup_missing(fx.pool, "before-1"), 0, "unlink before the crash undone");
	cr_assert_eq(lookup_missing(fx.pool, "before-2"), 0, "rename before the crash undone");
	struct meta_page_info renamed = before[2];
	snprintf(renamed.name, sizeof(renamed.name), "renamed");
	assert_same_page(&renamed);
	assert_same_page(&before[3]); /* its O_TRUNC replacement never committed */

	uint64_t used[FX_SLOTS];
	int nused = 0;
	used[nused++] = before[0].slot;
	used[nused++] = before[2].slot;
	used[nused++] = before[3].slot;
	for (int i = 0; i < CHILD_COMMITS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "after-%d", i);
		struct meta_page_info p = lookup_ok(fx.pool, name);
		cr_assert_eq(p.length, 1000 + (uint64_t)i, "%s: length %llu", name,
		             (unsigned long long)p.length);
		cr_assert_eq(p.checksum, 0x5000 + (uint64_t)i, "%s: checksum %llx", name,
		             (unsigned long long)p.checksum);
		for (int j = 0; j < nused; j++)
			cr_assert_neq(p.slot, used[j], "%s shares slot %llu", name,
			              (unsigned long long)p.slot);
		used[nused++] = p.slot;
	}
	for (int i = 0; i < CHILD_PENDING; i++) {
		char name[32];

		snprintf(name, sizeof(name), "pending-%d", i);
		cr_assert_eq(lookup_missing(fx.pool, name), 0, "%s: uncommitted page still pending",
		             name);
	}

	pi = pool_info(fx.pool);
	cr_assert_eq(pi.pages, (uint64_t)nused, "%llu pages after the crash, want %d",
	             (unsigned long long)pi.pages, nused);
	cr_assert_eq(pi.used_slots, (uint64_t)nused,
	             "%llu used slots after the crash, want %d: reservations leaked",
	             (unsigned long long)pi.used_slots, nused);
	/* Free space is whole again: every other slot can be reserved. */
	for (int i = nused; i < FX_SLOTS; i++) {
		char name[32];

		snprintf(name, sizeof(name), "refill-%d", i);
		struct meta_resv r = reserve_ok(fx.pool, name, 0);
		for (int j = 0; j < nused; j++)
			cr_assert_neq(r.slot, used[j], "%s got slot %llu of a committed page", name,
			              (unsigned long long)r.slot);
	}
	assert_reserve_fails(fx.pool, "one-too-many", -ENOSPC);
}

/* ---- clean close ---- */

Test(recovery, reopen_keeps_pages_ids_slots_lengths_and_checksums)
{
	struct meta_page_info keep[6];
	char name[32];
	int ret;

	fx_open();
	fx_setup_pool();
	put_pages(fx.pool, 6, keep);
	/* page-01 renamed, page-02 unlinked, page-03 replaced in place. */
	ret = meta_page_rename(fx.m, fx.pool, "page-01", "moved", 0);
	cr_assert_eq(ret, 0, "rename page-01: %s", strerror(-ret));
	keep[1] = lookup_ok(fx.pool, "moved");
	ret = meta_page_unlink(fx.m, fx.pool, "page-02");
	cr_assert_eq(ret, 0, "unlink page-02: %s", strerror(-ret));
	struct meta_resv r = reserve_ok(fx.pool, "page-03", keep[3].id);
	commit_ok(&r, "page-03", 3333, 0x3333);
	keep[3] = lookup_ok(fx.pool, "page-03");
	struct meta_pool_info other;
	ret = meta_pool_create(fx.m, 2, "mamba", 8192, 4 * 8192, &other);
	cr_assert_eq(ret, 0, "create 2/mamba: %s", strerror(-ret));
	struct meta_resv rb = reserve_ok(other.id, "m", 0);
	commit_ok(&rb, "m", 8000, 0x8000);
	struct meta_pool_info before = pool_info(fx.pool);

	fx_reopen();
	for (int i = 0; i < 6; i++)
		if (i != 2)
			assert_same_page(&keep[i]);
	cr_assert_eq(lookup_missing(fx.pool, "page-01"), 0, "renamed page back under its old name");
	cr_assert_eq(lookup_missing(fx.pool, "page-02"), 0, "unlinked page came back");
	struct meta_pool_info after = pool_info(fx.pool);
	cr_assert_eq(after.pages, before.pages, "pages %llu, was %llu",
	             (unsigned long long)after.pages, (unsigned long long)before.pages);
	cr_assert_eq(after.bytes, before.bytes, "bytes %llu, was %llu",
	             (unsigned long long)after.bytes, (unsigned long long)before.bytes);
	cr_assert_eq(after.used_slots, before.used_slots, "used slots %llu, was %llu",
	             (unsigned long long)after.used_slots, (unsigned long long)before.used_slots);

	struct meta_page_info m;
	int pending;
	ret = meta_page_lookup(fx.m, other.id, "m", &m, &pending);
	cr_assert_eq(ret, 0, "2/mamba page after reopen: %s", strerror(-ret));
	cr_assert(m.length == 8000 && m.checksum == 0x8000 && m.slot == rb.slot,
	          "2/mamba page changed: length %llu checksum %llx slot %llu",
	          (unsigned long long)m.length, (unsigned long long)m.checksum,
	          (unsigned long long)m.slot);
	page_name(name, sizeof(name), 5);
	lookup_ok(fx.pool, name);
}

Test(recovery, pages_after_reopen_never_repeat_an_id_and_generation)
{
	fx_open();
	fx_setup_pool();
	struct meta_page_info a = put_page(fx.pool, "a", 1, 1);
	struct meta_page_info b = put_page(fx.pool, "b", 1, 1);
	int ret = meta_page_unlink(fx.m, fx.pool, "b");
	cr_assert_eq(ret, 0, "unlink b: %s", strerror(-ret));

	fx_reopen();
	struct meta_page_info c = put_page(fx.pool, "c", 1, 1);
	cr_assert_neq(c.id, a.id, "new page took live page a's id %llu", (unsigned long long)a.id);
	cr_assert(c.id != b.id || c.gen != b.gen,
	          "new page repeats unlinked page b's id %llu and generation %u",
	          (unsigned long long)b.id, b.gen);
	cr_assert_gt(c.gen, a.gen, "generation %u after reopen, was %u", c.gen, a.gen);
	cr_assert_eq(lookup_ok(fx.pool, "a").gen, a.gen, "an old page's generation changed");
}

Test(recovery, power_durability_keeps_pages_across_reopen)
{
	fx.cfg.durability = META_DURABLE_POWER;
	fx_open();
	fx_setup_pool();
	struct meta_page_info a = put_page(fx.pool, "a", 77, 0x77);

	fx_reopen();
	assert_same_page(&a);
}

Test(recovery, a_bare_path_names_the_same_index_as_sqlite_uri)
{
	fx_open();
	fx_setup_pool();
	struct meta_page_info a = put_page(fx.pool, "a", 5, 5);

	fx_close();
	fx.cfg.uri = fx.index;
	fx_open();
	assert_same_page(&a);
}

/* ---- crashes ---- */

Test(recovery, exit_without_close_keeps_commits_and_frees_reservations)
{
	crash_and_check(0);
}

Test(recovery, sigkill_keeps_commits_and_frees_reservations)
{
	crash_and_check(1);
}

Test(recovery, second_open_while_another_process_holds_the_index_is_refused)
{
	int ready[2], release[2], status;
	char c = 0, err[1024];

	fx_open();
	fx_setup_pool();
	fx_close();
	cr_assert(pipe(ready) == 0 && pipe(release) == 0, "pipe: %s", strerror(errno));
	pid_t pid = fork();
	cr_assert_geq(pid, 0, "fork: %s", strerror(errno));
	if (pid == 0) {
		struct meta *m = NULL;
		char cerr[512];

		close(ready[0]);
		close(release[1]);
		if (meta_open(&fx.cfg, &m, cerr, sizeof(cerr)) < 0)
			_exit(10);
		if (write(ready[1], "r", 1) != 1)
			_exit(11);
		if (read(release[0], &c, 1) < 0) /* EOF when the parent is done */
			_exit(12);
		meta_close(m);
		_exit(0);
	}
	close(ready[1]);
	close(release[0]);
	ssize_t n = read(ready[0], &c, 1);
	if (n != 1) {
		close(release[1]);
		waitpid(pid, &status, 0);
		cr_assert_fail("child could not open the index (exit %d)",
		               WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	}

	int ret = open_fails(err, sizeof(err));
	close(release[1]);
	waitpid(pid, &status, 0);
	cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child failed: status %#x",
	          status);
	cr_assert_neq(ret, -ENOENT, "refusal reported as ENOENT: %s", err);
	assert_mentions(err, fx.index);

	/* Once the other process closed it, the index opens again. */
	fx_open();
}

/* ---- bad index files ---- */

Test(recovery, newer_schema_version_is_refused_with_a_message)
{
	char err[1024];

	fx_open();
	fx_setup_pool();
	fx_close();
	sql_exec(fx.index, "UPDATE settings SET value='999' WHERE key='schema_version'", 1);

	open_fails(err, sizeof(err));
	assert_mentions(err, "999");
}

Test(recovery, garbage_index_is_refused_naming_pagefs_fsck_and_left_alone)
{
	char junk[8192], err[1024];
	size_t len;

	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = "this is not an index\n"[i % 21];
	write_file(fx.index, junk, sizeof(junk));

	open_fails(err, sizeof(err));
	assert_mentions(err, "pagefs fsck");
	char *after = slurp(fx.index, &len);
	cr_assert(len == sizeof(junk) && memcmp(after, junk, len) == 0,
	          "a refused open changed the garbage index file (%zu bytes now)", len);
	free(after);
}

Test(recovery, corrupt_index_is_refused_naming_pagefs_fsck)
{
	struct meta_page_info before[4];
	char err[1024];
	size_t len;

	make_index(before);
	remove_sidecars(fx.index);
	char *db = slurp(fx.index, &len);
	cr_assert_gt(len, 4096, "index is only %zu bytes", len);
	/* Keep the SQLite header page, wreck every table page after it. */
	for (size_t i = 4096; i < len; i++)
		db[i] = (char)(0xa5 ^ (i * 31));
	write_file(fx.index, db, len);
	free(db);

	open_fails(err, sizeof(err));
	assert_mentions(err, "pagefs fsck");
}

Test(recovery, foreign_sqlite_database_is_refused_naming_pagefs_fsck)
{
	char err[1024];

	sql_exec(fx.index, "CREATE TABLE recipes(name TEXT); INSERT INTO recipes VALUES('soup')",
	         -1);
	open_fails(err, sizeof(err));
	assert_mentions(err, fx.index);
	/* The SPEC: a corrupt or foreign metadata file fails naming `pagefs fsck`. */
	assert_mentions(err, "pagefs fsck");
}

Test(recovery, foreign_sqlite_database_is_left_alone)
{
	char err[1024];
	sqlite3 *db;
	sqlite3_stmt *st;

	sql_exec(fx.index, "CREATE TABLE recipes(name TEXT); INSERT INTO recipes VALUES('soup')",
	         -1);
	open_fails(err, sizeof(err));

	cr_assert_eq(sqlite3_open(fx.index, &db), SQLITE_OK, "reopen the foreign database");
	cr_assert_eq(sqlite3_prepare_v2(db, "SELECT group_concat(name) FROM sqlite_master", -1, &st,
	                                NULL),
	             SQLITE_OK, "query: %s", sqlite3_errmsg(db));
	cr_assert_eq(sqlite3_step(st), SQLITE_ROW, "query: %s", sqlite3_errmsg(db));
	const char *tables = (const char *)sqlite3_column_text(st, 0);
	cr_assert_str_eq(tables ? tables : "", "recipes", "refused open changed the schema: %s",
	                 tables ? tables : "(none)");
	sqlite3_finalize(st);
	sqlite3_close(db);
}

Test(recovery, unsupported_uri_is_refused_with_a_message)
{
	char err[1024];

	fx.cfg.uri = "mysql://db.example/pagefs";
	open_fails(err, sizeof(err));
	assert_mentions(err, "mysql://db.example/pagefs");
}

Test(recovery, missing_backing_directory_is_refused_naming_it)
{
	char err[1024], missing[600];

	snprintf(missing, sizeof(missing), "%s/no-such-dir", fx.dir);
	fx.cfg.backing = missing;
	open_fails(err, sizeof(err));
	assert_mentions(err, missing);
}

/* ---- ownership of the backing directory ---- */

Test(recovery, backing_directory_of_another_index_is_refused)
{
	struct meta_page_info before[4];
	char other[600], err[1024];

	make_index(before);
	snprintf(other, sizeof(other), "sqlite:%s/other.db", fx.dir);
	fx.cfg.uri = other;
	open_fails(err, sizeof(err));
	assert_mentions(err, fx.backing);

	/* The refused index did not take the directory over. */
	fx.cfg.uri = fx.uri;
	fx_open();
	fx.pool = before[0].pool_id;
	assert_same_page(&before[0]);
}

Test(recovery, backing_directory_of_an_empty_new_index_is_refused_too)
{
	char other[600], err[1024];

	fx_open(); /* no pools: the directory is owned all the same */
	fx_close();
	snprintf(other, sizeof(other), "sqlite:%s/other.db", fx.dir);
	fx.cfg.uri = other;
	open_fails(err, sizeof(err));
}

Test(recovery, index_with_pools_is_refused_on_another_backing_directory)
{
	struct meta_page_info before[4];
	char backing2[600], err[1024];

	make_index(before);
	snprintf(backing2, sizeof(backing2), "%s/backing2", fx.dir);
	cr_assert_eq(mkdir(backing2, 0755), 0, "mkdir %s: %s", backing2, strerror(errno));
	fx.cfg.backing = backing2;
	open_fails(err, sizeof(err));
}

Test(recovery, missing_data_file_of_a_pool_with_pages_is_refused)
{
	struct meta_page_info before[4];
	char path[600], err[1024];

	make_index(before);
	snprintf(path, sizeof(path), "%s/hicache.0.bin", fx.backing);
	cr_assert_eq(unlink(path), 0, "unlink %s: %s", path, strerror(errno));
	open_fails(err, sizeof(err));
	assert_mentions(err, path);
}

/* ---- read-only ---- */

Test(recovery, read_only_open_serves_pages_and_changes_nothing)
{
	struct meta_page_info before[4];
	struct meta_pool_info pi;
	struct meta_resv r;
	size_t len0, len1;

	make_index(before);
	remove_sidecars(fx.index);
	char *db0 = slurp(fx.index, &len0);

	fx.cfg.read_only = 1;
	fx_open();
	fx.pool = before[0].pool_id;
	assert_same_page(&before[1]);
	cr_assert_lt(meta_page_reserve(fx.m, fx.pool, "new", 0, &r), 0, "read-only reserve worked");
	cr_assert_lt(meta_page_unlink(fx.m, fx.pool, "before-0"), 0, "read-only unlink worked");
	cr_assert_lt(meta_page_rename(fx.m, fx.pool, "before-0", "x", 0), 0,
	             "read-only rename worked");
	cr_assert_lt(meta_pool_create(fx.m, 1, "kv", 0, 0, &pi), 0, "read-only pool create worked");
	sleep_ms(1100); /* past any once-a-second atime flush */
	lookup_ok(fx.pool, "before-0");
	fx_close();

	char *db1 = slurp(fx.index, &len1);
	cr_assert(len0 == len1 && memcmp(db0, db1, len0) == 0,
	          "a read-only open changed the index");
	free(db0);
	free(db1);
	fx.cfg.read_only = 0;
	fx_open();
	assert_same_page(&before[0]);
}

/* The load builds pages in one thread and links them in another, in
 * batches of 1024 and groups of 16 (meta/load.c): two rows of one name are
 * refused wherever the second falls (the first's group, the next one, a
 * later batch, the last, partial one), as is a bad row while the linker
 * works on earlier batches; the linker's error, on an earlier row, is the
 * one reported. Nothing of a refused load stays behind (the sanitizer
 * build checks for leaks). */
Test(recovery, a_refused_load_names_the_row_wherever_it_falls)
{
	enum { N = 3000 };
	const int twins[] = {1, 15, 16, 39, 1500, N - 1};
	static struct meta_page_info pages[N];
	struct meta_pool_info pi;
	char err[1024], sql[256], name[32], id[32];

	fx_open();
	int ret = meta_pool_create(fx.m, 1, "big", 4096, 4096 * 4096, &pi);
	cr_assert_eq(ret, 0, "create 1/big: %s", strerror(-ret));
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "big-%04d", i);
		pages[i] = put_page(pi.id, name, 100 + (uint64_t)i % 1000, 0x100 + (uint64_t)i);
	}
	fx_close();

	for (size_t k = 0; k < sizeof(twins) / sizeof(twins[0]); k++) {
		int t = twins[k];
		snprintf(sql, sizeof(sql),
		         "UPDATE pages SET name=CAST('big-0000' AS BLOB) WHERE id=%llu",
		         (unsigned long long)pages[t].id);
		sql_exec(fx.index, sql, 1);
		open_fails(err, sizeof(err));
		assert_mentions(err, "'big-0000'");
		assert_mentions(err, "pagefs fsck --repair");
		snprintf(id, sizeof(id), " %llu ", (unsigned long long)pages[t].id);
		assert_mentions(err, id);
		snprintf(sql, sizeof(sql),
		         "UPDATE pages SET name=CAST('big-%04d' AS BLOB) WHERE id=%llu", t,
		         (unsigned long long)pages[t].id);
		sql_exec(fx.index, sql, 1);
	}

	/* A slot past the pool's end, late in the scan. */
	snprintf(sql, sizeof(sql), "UPDATE pages SET slot=999999 WHERE id=%llu",
	         (unsigned long long)pages[2500].id);
	sql_exec(fx.index, sql, 1);
	open_fails(err, sizeof(err));
	snprintf(id, sizeof(id), "page %llu ('big-2500')", (unsigned long long)pages[2500].id);
	assert_mentions(err, id);
	/* ... and a twin before it: the linker's error is the one told. */
	snprintf(sql, sizeof(sql), "UPDATE pages SET name=CAST('big-0000' AS BLOB) WHERE id=%llu",
	         (unsigned long long)pages[700].id);
	sql_exec(fx.index, sql, 1);
	open_fails(err, sizeof(err));
	assert_mentions(err, "both named 'big-0000'");
	snprintf(sql, sizeof(sql),
	         "UPDATE pages SET name=CAST('big-0700' AS BLOB) WHERE id=%llu;"
	         "UPDATE pages SET slot=%llu WHERE id=%llu",
	         (unsigned long long)pages[700].id, (unsigned long long)pages[2500].slot,
	         (unsigned long long)pages[2500].id);
	sql_exec(fx.index, sql, 1);

	fx_open();
	for (int i = 0; i < N; i++) {
		snprintf(name, sizeof(name), "big-%04d", i);
		struct meta_page_info p = lookup_ok(pi.id, name);
		cr_assert_eq(p.id, pages[i].id, "%s: id %llu, was %llu", name,
		             (unsigned long long)p.id, (unsigned long long)pages[i].id);
		cr_assert_eq(p.slot, pages[i].slot, "%s: slot %llu, was %llu", name,
		             (unsigned long long)p.slot, (unsigned long long)pages[i].slot);
	}
	struct meta_pool_info after = pool_info(pi.id);
	cr_assert_eq(after.pages, N, "pages %llu after the load, want %d",
	             (unsigned long long)after.pages, N);
}
