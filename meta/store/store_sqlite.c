/*
 * store_sqlite.c - the embedded store: one SQLite database in WAL mode.
 *
 * One connection, behind db_lock: the journal's batch writer holds it
 * from begin to commit or rollback, page iteration (readdir) for one call.
 * The daemon lock (flock on PATH.lock, open.c's store_index_lock) is taken
 * before SQLite opens the file, and keeps every other process out: a
 * second daemon, fsck, import and export are refused with the daemon's
 * pid. A writable index then runs in SQLite's exclusive locking mode: the
 * connection keeps its file locks and its WAL index in its own memory (no
 * -shm file), which spares each transaction six fcntl calls on the -shm
 * and a third of its time (measured: 36 -> 27 us a commit). An `sqlite3`
 * shell on the file waits until the daemon is gone.
 *
 * Durability: synchronous=OFF for --durability process (a committed WAL
 * frame is in the kernel's page cache and survives a crash of the
 * process), synchronous=FULL for power (the WAL is fsynced at commit).
 *
 * Pages are rows of `pages`, except those of bulk records (the key
 * protocol's confirms, imports) on an index of schema 4: those are blobs
 * of the page log (sqlite_log.h) until anything but a delete changes them.
 */
#include "meta/log.h"
#include "meta/store.h"
#include "meta/store/sqlite_gather.h"
#include "meta/store/sqlite_log.h"

#include <errno.h>
#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* SQLite's page cache while the daemon runs. Lookups never read SQLite
 * (the index is in memory): the cache holds what a transaction writes,
 * the B-trees' inner pages and a delete's leaf. At 64 MiB it took 16,000
 * first touches of fresh memory in a new daemon's first 1.6 million
 * protocol keys, for pages nobody read again (BENCHMARKS.md, "SQLite's
 * page cache and the WAL's writes"). */
#define RUN_CACHE "PRAGMA cache_size=-8192"

enum stmt_id {
	ST_REPLACED_DEL,
	ST_HAS_PAGE,
	ST_COMMIT_PUT,
	ST_COMMIT_SET,
	ST_DELETE,
	ST_RENAME,
	ST_TOUCH,
	ST_RANK_PUT,
	ST_POOL_PUT,
	ST_POOL_DEL,
	ST_RANK_DEL,
	ST_SETTING,
	ST_CHECKSUM,
	ST_SAVEPOINT,
	ST_RELEASE,
	ST_ROLLBACK_TO,
	ST_BEGIN,
	ST_END,
	ST_ITER,
	ST_COUNT
};

static const char *const stmt_sql[ST_COUNT] = {
	[ST_REPLACED_DEL] = "DELETE FROM pages WHERE id=?3 AND pool=?1 AND name=?2",
	[ST_HAS_PAGE] = "SELECT 1 FROM pages WHERE id=?1",
	/* (several literals, one statement: not a missing comma) */
	// NOLINTNEXTLINE(bugprone-suspicious-missing-comma)
	[ST_COMMIT_PUT] = "INSERT INTO pages(id,pool,name,slot,length,checksum,mtime,atime,gen)"
			  " VALUES(?1,?2,?3,?4,?5,?6,?7,?8,?9) ON CONFLICT(id) DO UPDATE SET"
			  " name=excluded.name, slot=excluded.slot, length=excluded.length,"
			  " checksum=excluded.checksum, mtime=excluded.mtime, atime=excluded.atime,"
			  " gen=excluded.gen",
	[ST_COMMIT_SET] = "UPDATE pages SET slot=?2, length=?3, checksum=?4, mtime=?5, atime=?6,"
			  " gen=?7 WHERE id=?1 RETURNING name",
	[ST_DELETE] = "DELETE FROM pages WHERE id=?1",
	[ST_RENAME] = "UPDATE pages SET name=?2 WHERE id=?1",
	[ST_TOUCH] = "UPDATE pages SET atime=?2 WHERE id=?1 AND atime<?2",
	[ST_RANK_PUT] = "INSERT OR IGNORE INTO ranks(rank) VALUES(?1)",
	[ST_POOL_PUT] = "INSERT INTO pools(id,rank,ns,slot_size,capacity) VALUES(?1,?2,?3,?4,?5)"
			" ON CONFLICT(id) DO UPDATE SET slot_size=excluded.slot_size,"
			" capacity=excluded.capacity",
	[ST_POOL_DEL] = "DELETE FROM pools WHERE id=?1",
	[ST_RANK_DEL] = "DELETE FROM ranks WHERE rank=?1",
	[ST_SETTING] = "INSERT OR REPLACE INTO settings(key,value) VALUES(?1,?2)",
	[ST_CHECKSUM] = "UPDATE pages SET checksum=?3 WHERE id=?1 AND slot=?2 AND checksum IS NULL",
	[ST_SAVEPOINT] = "SAVEPOINT rec",
	[ST_RELEASE] = "RELEASE rec",
	[ST_ROLLBACK_TO] = "ROLLBACK TO rec",
	/* Prepared once: sqlite3_exec would compile them for every batch. */
	[ST_BEGIN] = "BEGIN IMMEDIATE",
	[ST_END] = "COMMIT",
	/* "+pool": walk the primary key from ?2. With the (pool, name)
	 * index SQLite would sort the whole rest of the pool on every
	 * call, and a listing would cost O(pages^2). */
	[ST_ITER] = "SELECT id,name,slot,length,checksum,mtime,atime,gen FROM pages"
		    " WHERE +pool=?1 AND id>?2 ORDER BY id",
};

/* Schema 3: pages has no index besides its id. Names and slots are unique
 * in memory, which knows the rows a commit replaces (delete_replaced); the
 * load refuses two rows of one name or one slot and fsck repairs them. An
 * index on either made every row cost a second B-tree insert (DECISIONS.md,
 * "The SQLite index has no index on names or slots"). */
static const char schema_sql[] =
	"CREATE TABLE settings(key TEXT PRIMARY KEY, value TEXT NOT NULL);"
	"CREATE TABLE ranks(rank INTEGER PRIMARY KEY);"
	"CREATE TABLE pools(id INTEGER PRIMARY KEY, rank INTEGER NOT NULL, ns TEXT NOT NULL,"
	" slot_size INTEGER NOT NULL, capacity INTEGER NOT NULL, UNIQUE(rank, ns));"
	"CREATE TABLE pages(id INTEGER PRIMARY KEY, pool INTEGER NOT NULL, name BLOB NOT NULL,"
	" slot INTEGER NOT NULL, length INTEGER NOT NULL, checksum INTEGER,"
	" mtime INTEGER NOT NULL, atime INTEGER NOT NULL, gen INTEGER NOT NULL);" PLOG_SCHEMA;

struct sqlite_store {
	struct store base; /* first: a struct store * points here */
	sqlite3 *db;       /* after open: used under db_lock */
	sqlite3_stmt *st[ST_COUNT];
	char *path;
	int read_only;
	pthread_mutex_t db_lock; /* held from begin to commit/rollback */
	int lock_fd;             /* flock on PATH.lock (store_index_lock), or -1 */
	struct store_log *log;   /* the page log (schema 4), or NULL: rows only */
};

static int sq_get_setting(struct store *base, const char *key, char *buf, size_t len);
static const struct store_ops sqlite_ops;

/* Maps an SQLite result code to a negative errno. */
static int sql_errno(int rc)
{
	switch (rc & 0xff) {
	case SQLITE_OK:
	case SQLITE_DONE:
	case SQLITE_ROW:
		return 0;
	case SQLITE_FULL:
		return -ENOSPC;
	case SQLITE_NOMEM:
		return -ENOMEM;
	case SQLITE_BUSY:
	case SQLITE_LOCKED:
		return -EBUSY;
	case SQLITE_READONLY:
		return -EROFS;
	case SQLITE_CONSTRAINT:
		return -EEXIST;
	case SQLITE_CANTOPEN:
		return -ENOENT;
	case SQLITE_PERM:
	case SQLITE_AUTH:
		return -EACCES;
	default:
		return -EIO;
	}
}

static int exec(struct sqlite_store *s, const char *sql)
{
	return sql_errno(sqlite3_exec(s->db, sql, NULL, NULL, NULL));
}

static sqlite3_stmt *stmt(struct sqlite_store *s, enum stmt_id id)
{
	if (!s->st[id] && sqlite3_prepare_v3(s->db, stmt_sql[id], -1, SQLITE_PREPARE_PERSISTENT,
	                                     &s->st[id], NULL))
		return NULL;
	return s->st[id];
}

/* Runs a bound statement to completion and resets it. */
static int step_done(sqlite3_stmt *st)
{
	int rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : sql_errno(rc);
}

static int run0(struct sqlite_store *s, enum stmt_id id)
{
	sqlite3_stmt *st = stmt(s, id);
	return st ? step_done(st) : sql_errno(sqlite3_errcode(s->db));
}

static int table_exists(struct sqlite_store *s, const char *name, int *yes)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master WHERE name=?1", -1,
	                            &st, NULL);
	if (rc)
		return rc;
	sqlite3_bind_text(st, 1, name, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	*yes = rc == SQLITE_ROW && sqlite3_column_int(st, 0) > 0;
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

static int count_tables(struct sqlite_store *s, int *n)
{
	sqlite3_stmt *st;
	int rc = sqlite3_prepare_v2(s->db, "SELECT count(*) FROM sqlite_master", -1, &st, NULL);
	if (rc)
		return rc;
	rc = sqlite3_step(st);
	*n = sqlite3_column_int(st, 0);
	sqlite3_finalize(st);
	return rc == SQLITE_ROW ? SQLITE_OK : rc;
}

/* Creates the schema in a new database, or checks the version of an
 * existing one. */
/* -EINVAL with a message if the file is another program's SQLite
 * database (tables, none of them pagefs's settings); 0 otherwise, also
 * when it cannot tell (check_schema then reports what is wrong). Runs
 * before anything changes the file: the switch to WAL would rewrite a
 * foreign database's header before it is refused. */
static int check_foreign(struct sqlite_store *s, char *err, size_t errlen)
{
	int has_settings = 0, ntables = 0;

	if (table_exists(s, "settings", &has_settings) != SQLITE_OK ||
	    count_tables(s, &ntables) != SQLITE_OK || has_settings || ntables == 0)
		return 0;
	snprintf(err, errlen,
	         "%s is an SQLite database but not a pagefs index ('pagefs fsck' cannot "
	         "repair it); give --meta another path",
	         s->path);
	return -EINVAL;
}

static int check_schema(struct sqlite_store *s, char *err, size_t errlen)
{
	int has_settings = 0, ntables = 0, rc;
	char ver[32];

	rc = table_exists(s, "settings", &has_settings);
	if (rc == SQLITE_OK)
		rc = count_tables(s, &ntables);
	if (rc != SQLITE_OK && (rc & 0xff) != SQLITE_CORRUPT && (rc & 0xff) != SQLITE_NOTADB) {
		/* The file may be fine: reading it needs room for its -shm and
		 * -wal files, and a readable disk (a full one said "disk I/O
		 * error" and suggested moving the index away). */
		int e = sqlite3_system_errno(s->db);
		snprintf(err, errlen, "cannot read index %s: %s%s", s->path,
		         e ? strerror(e) : sqlite3_errstr(rc),
		         e == ENOSPC || e == EDQUOT
		                 ? " (SQLite needs room beside it for its -shm and -wal files); "
		                   "free some space and try again"
		                 : "");
		return e ? -e : -EIO;
	}
	if (rc != SQLITE_OK) {
		snprintf(err, errlen,
		         "index %s is not a readable SQLite database (%s); 'pagefs fsck' cannot "
		         "repair that: restore it, or move it away to start a new index",
		         s->path, sqlite3_errstr(rc));
		return -EIO;
	}
	if (!has_settings && ntables > 0) {
		snprintf(err, errlen,
		         "%s is an SQLite database but not a pagefs index ('pagefs fsck' cannot "
		         "repair it); give --meta another path",
		         s->path);
		return -EINVAL;
	}
	if (!has_settings) {
		if (s->read_only) {
			snprintf(err, errlen, "index %s is empty and the mount is read-only",
			         s->path);
			return -EROFS;
		}
		char sql[2048];
		snprintf(sql, sizeof(sql),
		         "BEGIN; %s INSERT INTO settings VALUES('schema_version','%d'); COMMIT;",
		         schema_sql, STORE_SCHEMA_VERSION);
		rc = exec(s, sql);
		if (rc < 0) {
			snprintf(err, errlen, "cannot create the index schema in %s: %s", s->path,
			         sqlite3_errmsg(s->db));
			return rc;
		}
		return 0;
	}
	rc = sq_get_setting(&s->base, "schema_version", ver, sizeof(ver));
	if (rc < 0 || atoi(ver) <= 0) {
		snprintf(err, errlen, "index %s has no schema version; run 'pagefs fsck' on it",
		         s->path);
		return -EIO;
	}
	if (atoi(ver) > STORE_SCHEMA_VERSION) {
		snprintf(err, errlen,
		         "index %s has schema version %s, newer than this pagefs understands (%d); "
		         "upgrade pagefs",
		         s->path, ver, STORE_SCHEMA_VERSION);
		return -EPROTO;
	}
	return 0;
}

static void sq_close(struct store *base)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	if (!s)
		return;
	for (int i = 0; i < ST_COUNT; i++)
		sqlite3_finalize(s->st[i]);
	store_log_free(s->log);
	if (s->db)
		sqlite3_close(s->db);
	pthread_mutex_destroy(&s->db_lock);
	if (s->lock_fd >= 0)
		close(s->lock_fd); /* releases the flock */
	free(s->path);
	free(s);
}

static int sq_get_setting(struct store *base, const char *key, char *buf, size_t len)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	sqlite3_stmt *st;
	int rc =
		sqlite3_prepare_v2(s->db, "SELECT value FROM settings WHERE key=?1", -1, &st, NULL);

	if (rc)
		return sql_errno(rc);
	sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		const unsigned char *v = sqlite3_column_text(st, 0);
		snprintf(buf, len, "%s", v ? (const char *)v : "");
		rc = 0;
	} else {
		rc = rc == SQLITE_DONE ? -ENOENT : sql_errno(rc);
	}
	sqlite3_finalize(st);
	return rc;
}

static int sq_set_setting(struct store *base, const char *key, const char *value)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	sqlite3_stmt *st = stmt(s, ST_SETTING);

	if (!st)
		return sql_errno(sqlite3_errcode(s->db));
	sqlite3_bind_text(st, 1, key, -1, SQLITE_TRANSIENT);
	sqlite3_bind_text(st, 2, value, -1, SQLITE_TRANSIENT);
	return step_done(st);
}

static int load_error(struct sqlite_store *s, int rc, char *err, size_t errlen)
{
	snprintf(err, errlen, "cannot read index %s (%s); run 'pagefs fsck' on it", s->path,
	         sqlite3_errmsg(s->db));
	return sql_errno(rc) ? sql_errno(rc) : -EIO;
}

/* The file's size over the size of a row whose name is as long as the
 * first rows' names: a schema 3 row takes 39-41 bytes besides its name
 * (103.2 a page measured with 64-byte names, 128.3 with 87), about 8 more
 * with a checksum, so 36 errs a little high; schema 2's slot index adds
 * about 14 and schema 1's name index about as much again as the row,
 * which errs higher. */
static uint64_t sq_estimate(struct store *base)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	sqlite3_stmt *st = NULL;
	uint64_t n = 0;

	if (sqlite3_prepare_v2(s->db,
	                       "SELECT (SELECT page_count FROM pragma_page_count) * "
	                       "(SELECT page_size FROM pragma_page_size), "
	                       "(SELECT avg(length(name)) FROM (SELECT name FROM pages LIMIT 256))",
	                       -1, &st, NULL) == SQLITE_OK &&
	    sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 1) != SQLITE_NULL) {
		double bytes = (double)sqlite3_column_int64(st, 0);
		n = (uint64_t)(bytes / (sqlite3_column_double(st, 1) + 36.0));
	}
	sqlite3_finalize(st);
	st = NULL;
	/* The log's pages are counted exactly (the file's size above holds
	 * them too: an estimate that errs high). The count reads a leaf page
	 * a blob: mapped, and through a small cache (as the load). */
	if (s->log) {
		exec(s, "PRAGMA mmap_size=1099511627776");
		exec(s, "PRAGMA cache_size=-1024");
		if (sqlite3_prepare_v2(s->db, "SELECT total(n) FROM page_log", -1, &st, NULL) ==
		            SQLITE_OK &&
		    sqlite3_step(st) == SQLITE_ROW)
			n += (uint64_t)sqlite3_column_int64(st, 0);
		sqlite3_finalize(st);
		exec(s, RUN_CACHE);
		exec(s, "PRAGMA mmap_size=0");
	}
	return n;
}

static int sq_load(struct store *base, const struct store_load_cb *cb, char *err, size_t errlen)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	sqlite3_stmt *st = NULL;
	int rc, ret = 0;

	rc = sqlite3_prepare_v2(s->db, "SELECT rank FROM ranks", -1, &st, NULL);
	while (rc == SQLITE_OK && ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		rc = SQLITE_OK;
		ret = cb->rank(cb->arg, sqlite3_column_int(st, 0));
	}
	sqlite3_finalize(st);
	if (ret)
		return ret;
	if (rc != SQLITE_DONE)
		return load_error(s, rc, err, errlen);

	rc = sqlite3_prepare_v2(s->db,
	                        "SELECT id,rank,ns,slot_size,capacity FROM pools ORDER BY id", -1,
	                        &st, NULL);
	while (rc == SQLITE_OK && ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		struct store_pool_row row = {0};
		rc = SQLITE_OK;
		const unsigned char *ns = sqlite3_column_text(st, 2);
		row.id = (uint32_t)sqlite3_column_int64(st, 0);
		row.rank = (uint16_t)sqlite3_column_int(st, 1);
		snprintf(row.ns, sizeof(row.ns), "%s", ns ? (const char *)ns : "");
		row.slot_size = (uint64_t)sqlite3_column_int64(st, 3);
		row.capacity = (uint64_t)sqlite3_column_int64(st, 4);
		ret = cb->pool(cb->arg, &row);
	}
	sqlite3_finalize(st);
	if (ret)
		return ret;
	if (rc != SQLITE_DONE)
		return load_error(s, rc, err, errlen);

	struct rec *row = calloc(1, sizeof(*row));
	if (!row)
		return -ENOMEM;
	/* The scan reads the whole file: mapped, it costs no read() per 4 KiB
	 * page (a fifth of the load time). Only for the load: a mapping turns
	 * an I/O error into SIGBUS, which the daemon must not risk later. */
	exec(s, "PRAGMA mmap_size=1099511627776");
	rc = sqlite3_prepare_v2(
		s->db,
		/* rowid order: a plain scan (the engine sorts its LRU itself) */
		"SELECT id,pool,name,slot,length,checksum,mtime,atime,gen FROM pages", -1, &st,
		NULL);
	while (rc == SQLITE_OK && ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW) {
		int n = sqlite3_column_bytes(st, 2);
		rc = SQLITE_OK;
		/*
		 * A name of a bad length is passed on truncated, with name_len
		 * saying it does not fit (strlen(name) != name_len): the loader
		 * refuses it and fsck reports and drops it by id.
		 */
		size_t copy = n < 0 ? 0 : n > META_NAME_MAX ? META_NAME_MAX : (size_t)n;
		row->page_id = (uint64_t)sqlite3_column_int64(st, 0);
		row->pool_id = (uint32_t)sqlite3_column_int64(st, 1);
		if (copy)
			memcpy(row->name, sqlite3_column_blob(st, 2), copy);
		row->name[copy] = '\0';
		row->name_len = (uint16_t)(n > META_NAME_MAX ? META_NAME_MAX + 1 : copy);
		row->slot = (uint64_t)sqlite3_column_int64(st, 3);
		row->length = (uint64_t)sqlite3_column_int64(st, 4);
		row->has_checksum = sqlite3_column_type(st, 5) != SQLITE_NULL;
		row->checksum = (uint64_t)sqlite3_column_int64(st, 5);
		row->mtime_ns = sqlite3_column_int64(st, 6);
		row->atime_ns = sqlite3_column_int64(st, 7);
		row->gen = gen_of_column(sqlite3_column_int64(st, 8));
		row->version = version_of_column(sqlite3_column_int64(st, 8));
		ret = cb->page(cb->arg, row);
	}
	sqlite3_finalize(st);
	free(row);
	/* The blobs' overflow pages come through the page cache, not the
	 * mapping: a small cache for them, or the load leaves 64 MiB of
	 * pages nobody reads next in the heap. */
	if (ret == 0 && rc == SQLITE_DONE && s->log) {
		exec(s, "PRAGMA cache_size=-1024");
		ret = store_log_load(s->log, cb, cb->log_damaged, err, errlen);
		exec(s, RUN_CACHE);
	}
	exec(s, "PRAGMA mmap_size=0");
	if (ret)
		return ret;
	if (rc != SQLITE_DONE)
		return load_error(s, rc, err, errlen);
	return 0;
}

/* A transaction holds db_lock from begin (even one that fails) until a
 * commit that succeeds or a rollback: store.h's begin, apply..., commit,
 * else rollback. */
static int sq_begin(struct store *base)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	int rc;

	pthread_mutex_lock(&s->db_lock);
	if (s->log && (rc = store_log_ready(s->log)) < 0)
		return rc;
	return run0(s, ST_BEGIN);
}

/* The log's blobs that lost pages are written again inside the
 * transaction, before its COMMIT. */
static int sq_commit(struct store *base)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	int rc = s->log ? store_log_flush(s->log) : 0;

	if (rc == 0)
		rc = run0(s, ST_END);
	if (rc == 0 && s->log)
		store_log_done(s->log);
	/* The commit's frames are written out inside COMMIT; should any be
	 * left gathered, they are written now or the commit is not reported
	 * (the caller's rollback then releases db_lock). */
	if (rc == 0 && (rc = store_gather_flush(s->db)) != SQLITE_OK) {
		log_error("index %s: the WAL could not be written: %s", s->path,
		          sqlite3_errstr(rc));
		return sql_errno(rc);
	}
	if (rc == 0)
		pthread_mutex_unlock(&s->db_lock);
	return rc;
}

static void sq_rollback(struct store *base)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	exec(s, "ROLLBACK");
	if (s->log)
		store_log_undo(s->log, 0);
	pthread_mutex_unlock(&s->db_lock);
}

/* What a commit changes: slot, length, checksum, mtime, atime, gen (the
 * epoch and the version: gen_column), bound from parameter `at` on. */
static void bind_version(sqlite3_stmt *st, int at, const struct rec *r)
{
	sqlite3_bind_int64(st, at, (sqlite3_int64)r->slot);
	sqlite3_bind_int64(st, at + 1, (sqlite3_int64)r->length);
	if (r->has_checksum)
		sqlite3_bind_int64(st, at + 2, (sqlite3_int64)r->checksum);
	else
		sqlite3_bind_null(st, at + 2);
	sqlite3_bind_int64(st, at + 3, r->mtime_ns);
	sqlite3_bind_int64(st, at + 4, r->atime_ns);
	sqlite3_bind_int64(st, at + 5, gen_column(r->gen, r->version));
}

static void bind_page(sqlite3_stmt *st, const struct rec *r)
{
	sqlite3_bind_int64(st, 1, (sqlite3_int64)r->page_id);
	sqlite3_bind_int64(st, 2, r->pool_id);
	sqlite3_bind_blob(st, 3, r->name, r->name_len, SQLITE_STATIC);
	bind_version(st, 4, r); /* ?4 .. ?9 */
}

/* Deletes the rows ids[0 .. n) that still have (pool, name): the rows a
 * commit or rename replaces (struct rec, journal.c). */
static int delete_replaced(struct sqlite_store *s, uint32_t pool_id, const char *name, uint16_t len,
                           const uint64_t *ids, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		sqlite3_stmt *st = stmt(s, ST_REPLACED_DEL);
		int rc;
		/* A page of the log has the name it was written with (any
		 * rename moves it to a row first). */
		if (s->log && (rc = store_log_remove(s->log, ids[i])) != 0) {
			if (rc < 0)
				return rc;
			continue;
		}
		if (!st)
			return -EIO;
		sqlite3_bind_int64(st, 1, pool_id);
		sqlite3_bind_blob(st, 2, name, len, SQLITE_STATIC);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)ids[i]);
		if ((rc = step_done(st)) < 0)
			return rc;
	}
	return 0;
}

static int run_id(struct sqlite_store *s, enum stmt_id id, int64_t a, int64_t b, int nargs)
{
	sqlite3_stmt *st = stmt(s, id);
	if (!st)
		return -EIO;
	sqlite3_bind_int64(st, 1, a);
	if (nargs > 1)
		sqlite3_bind_int64(st, 2, b);
	return step_done(st);
}

/* A bulk record's page as the values of ST_COMMIT_PUT. */
static void bind_bulk_row(sqlite3_stmt *st, const struct bulk_row *p)
{
	sqlite3_bind_int64(st, 1, (sqlite3_int64)p->id);
	sqlite3_bind_int64(st, 2, p->pool_id);
	sqlite3_bind_blob(st, 3, p->name, p->name_len, SQLITE_STATIC);
	sqlite3_bind_int64(st, 4, (sqlite3_int64)p->slot);
	sqlite3_bind_int64(st, 5, (sqlite3_int64)p->length);
	if (p->has_checksum)
		sqlite3_bind_int64(st, 6, (sqlite3_int64)p->checksum);
	else
		sqlite3_bind_null(st, 6);
	sqlite3_bind_int64(st, 7, p->mtime_ns);
	sqlite3_bind_int64(st, 8, p->atime_ns);
	sqlite3_bind_int64(st, 9, p->gen);
}

/* REC_BULK into the log: each run of consecutive ids in one pool is a
 * blob (store_log_add), then the replaced pages go. (After: a page may replace
 * an earlier one of the same bulk, which is in the log only then.) */
static int log_bulk(struct sqlite_store *s, const struct bulk *b)
{
	struct bulk_row p;
	int rc = store_log_add(s->log, b);

	for (size_t i = 0; b->repl_at && i < b->n && rc == 0; i++) {
		if (b->repl_at[i + 1] == b->repl_at[i])
			continue;
		b->row(b, i, &p);
		rc = delete_replaced(s, p.pool_id, p.name, p.name_len, b->repl + b->repl_at[i],
		                     b->repl_at[i + 1] - b->repl_at[i]);
	}
	return rc;
}

/* REC_BULK: one row per page, or the log (schema 4); the caller's
 * savepoint makes it all or nothing. */
static int apply_bulk(struct sqlite_store *s, const struct rec *r)
{
	const struct bulk *b = r->bulk;
	sqlite3_stmt *st = stmt(s, ST_COMMIT_PUT);
	int rc = 0;

	if (s->log)
		return log_bulk(s, b);
	if (!st)
		return -EIO;
	if (b->n > 100000)
		exec(s, "PRAGMA cache_size=-524288"); /* no spills (a schema 1 name index fits) */
	for (size_t i = 0; i < b->n && rc == 0; i++) {
		struct bulk_row p;
		b->row(b, i, &p);
		/* Replaces the rows of the same name, as REC_COMMIT does (repl is
		 * NULL when no page of the batch replaces any). */
		if (b->repl_at && b->repl_at[i + 1] > b->repl_at[i] &&
		    (rc = delete_replaced(s, p.pool_id, p.name, p.name_len, b->repl + b->repl_at[i],
		                          b->repl_at[i + 1] - b->repl_at[i])) < 0)
			return rc;
		bind_bulk_row(st, &p);
		rc = step_done(st);
		if (b->progress && ((i + 1) % 65536 == 0 || i + 1 == b->n))
			b->progress(b->arg, i + 1, b->n);
	}
	if (b->n > 100000)
		exec(s, RUN_CACHE);
	return rc;
}

/* An O_TRUNC replacement: the page's row takes the new slot and keeps
 * its name, which goes to r (in_place). 0, 1 when there is no such row,
 * or -errno. */
static int replace_in_place(struct sqlite_store *s, struct rec *r)
{
	sqlite3_stmt *st = stmt(s, ST_COMMIT_SET);
	int rc;

	if (!st)
		return -EIO;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)r->page_id);
	bind_version(st, 2, r);
	rc = sqlite3_step(st);
	if (rc == SQLITE_ROW) {
		int len = sqlite3_column_bytes(st, 0);
		const void *name = sqlite3_column_blob(st, 0);
		if (len > 0 && len <= META_NAME_MAX && name) {
			memcpy(r->name, name, (size_t)len);
			r->name[len] = '\0';
			r->name_len = (uint16_t)len;
		}
		r->in_place = 1;
	}
	rc = rc == SQLITE_ROW || rc == SQLITE_DONE ? 0 : sql_errno(rc);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc < 0 ? rc : !r->in_place;
}

/* 1 if the page's row exists, 0 if not, or -errno. */
static int has_page(struct sqlite_store *s, uint64_t id)
{
	sqlite3_stmt *st = stmt(s, ST_HAS_PAGE);
	int rc;

	if (!st)
		return -EIO;
	sqlite3_bind_int64(st, 1, (sqlite3_int64)id);
	rc = sqlite3_step(st);
	sqlite3_reset(st);
	sqlite3_clear_bindings(st);
	return rc == SQLITE_ROW ? 1 : rc == SQLITE_DONE ? 0 : sql_errno(rc);
}

/* Moves page id from the log to a row of pages, if it is in the log:
 * before anything but a delete changes it (sqlite_log.h). */
static int unlog(struct sqlite_store *s, uint64_t id)
{
	struct bulk_row p;
	sqlite3_stmt *st;
	int rc;

	if (!s->log || !store_log_has(s->log, id))
		return 0;
	if ((rc = store_log_get(s->log, id, &p)) < 0 || !(st = stmt(s, ST_COMMIT_PUT)))
		return rc < 0 ? rc : -EIO;
	bind_bulk_row(st, &p);
	if ((rc = step_done(st)) < 0)
		return rc;
	return store_log_remove(s->log, id) < 0 ? -ENOMEM : 0;
}

/* 1 if page id was in the log and is deleted from it, 0 if not, -errno. */
static int unlog_delete(struct sqlite_store *s, uint64_t id)
{
	return s->log ? store_log_remove(s->log, id) : 0;
}

static int apply_one(struct sqlite_store *s, struct rec *r)
{
	sqlite3_stmt *st;
	int rc;

	switch (r->type) {
	case REC_COMMIT:
		r->in_place = 0;
		if (r->replace) { /* -ESTALE: unlinked or renamed over meanwhile */
			if ((rc = unlog(s, r->page_id)) < 0)
				return rc;
			return (rc = replace_in_place(s, r)) > 0 ? -ESTALE : rc;
		}
		/* (a copy of the same id in the log gives way to the row) */
		if ((rc = unlog_delete(s, r->page_id)) < 0)
			return rc;
		rc = delete_replaced(s, r->pool_id, r->name, r->name_len, r->repl, r->nrepl);
		if (rc < 0 || !(st = stmt(s, ST_COMMIT_PUT)))
			return rc < 0 ? rc : -EIO;
		bind_page(st, r);
		return step_done(st);
	case REC_UNLINK:
	case REC_DROP:
		if ((rc = unlog_delete(s, r->page_id)) != 0)
			return rc < 0 ? rc : 0;
		return run_id(s, ST_DELETE, (int64_t)r->page_id, 0, 1);
	case REC_RENAME:
		if ((rc = unlog(s, r->page_id)) < 0)
			return rc;
		/* A page unlinked since the rename was queued: nothing changes.
		 * (The deletes come first: a schema 1 index has a unique name.) */
		if ((rc = has_page(s, r->page_id)) <= 0)
			return rc < 0 ? rc : -ENOENT;
		rc = delete_replaced(s, r->pool_id, r->name, r->name_len, r->repl, r->nrepl);
		if (rc < 0 || !(st = stmt(s, ST_RENAME)))
			return rc < 0 ? rc : -EIO;
		sqlite3_bind_int64(st, 1, (sqlite3_int64)r->page_id);
		sqlite3_bind_blob(st, 2, r->name, r->name_len, SQLITE_STATIC);
		return step_done(st);
	case REC_TOUCH:
		if ((rc = unlog(s, r->page_id)) < 0)
			return rc;
		return run_id(s, ST_TOUCH, (int64_t)r->page_id, r->atime_ns, 2);
	case REC_RANK_PUT:
		return run_id(s, ST_RANK_PUT, r->rank, 0, 1);
	case REC_RANK_DEL:
		return run_id(s, ST_RANK_DEL, r->rank, 0, 1);
	case REC_POOL_PUT:
		rc = run_id(s, ST_RANK_PUT, r->rank, 0, 1);
		if (rc < 0 || !(st = stmt(s, ST_POOL_PUT)))
			return rc < 0 ? rc : -EIO;
		sqlite3_bind_int64(st, 1, r->pool_id);
		sqlite3_bind_int64(st, 2, r->rank);
		sqlite3_bind_text(st, 3, r->ns, -1, SQLITE_STATIC);
		sqlite3_bind_int64(st, 4, (sqlite3_int64)r->slot_size);
		sqlite3_bind_int64(st, 5, (sqlite3_int64)r->capacity);
		return step_done(st);
	case REC_POOL_DEL:
		return run_id(s, ST_POOL_DEL, r->pool_id, 0, 1);
	case REC_SETTING:
		return sq_set_setting(&s->base, r->key, r->value);
	case REC_BULK:
		return apply_bulk(s, r);
	case REC_LEASE:
	case REC_RELEASE:
	case REC_POOL_RETIRE:
		return -EINVAL; /* one daemon per SQLite index: no chunks, no retiring */
	case REC_LOG_DROP:
		return s->log ? store_log_drop(s->log, (int64_t)r->page_id) : -EINVAL;
	case REC_CHECKSUM:
		if ((rc = unlog(s, r->page_id)) < 0)
			return rc;
		if (!(st = stmt(s, ST_CHECKSUM)))
			return -EIO;
		sqlite3_bind_int64(st, 1, (sqlite3_int64)r->page_id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)r->slot);
		sqlite3_bind_int64(st, 3, (sqlite3_int64)r->checksum);
		return step_done(st);
	}
	return -EINVAL;
}

static int sq_apply(struct store *base, struct rec *r)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	size_t mark = s->log ? store_log_mark(s->log) : 0;
	int rc = run0(s, ST_SAVEPOINT);

	if (rc < 0)
		return rc;
	rc = apply_one(s, r);
	if (rc < 0) {
		run0(s, ST_ROLLBACK_TO);
		if (s->log)
			store_log_undo(s->log, mark);
	}
	run0(s, ST_RELEASE);
	return rc;
}

/* The row at st as a page of pool_id; 0 if its name is unusable. */
static int row_info(sqlite3_stmt *st, uint32_t pool_id, struct meta_page_info *info)
{
	int n = sqlite3_column_bytes(st, 1);

	memset(info, 0, sizeof(*info));
	if (n <= 0 || n > META_NAME_MAX)
		return 0;
	info->id = (uint64_t)sqlite3_column_int64(st, 0);
	info->pool_id = pool_id;
	memcpy(info->name, sqlite3_column_blob(st, 1), (size_t)n);
	info->slot = (uint64_t)sqlite3_column_int64(st, 2);
	info->length = (uint64_t)sqlite3_column_int64(st, 3);
	info->has_checksum = sqlite3_column_type(st, 4) != SQLITE_NULL;
	info->checksum = (uint64_t)sqlite3_column_int64(st, 4);
	info->mtime_ns = sqlite3_column_int64(st, 5);
	info->atime_ns = sqlite3_column_int64(st, 6);
	info->gen = gen_of_column(sqlite3_column_int64(st, 7));
	info->version = version_of_column(sqlite3_column_int64(st, 7));
	info->committed = 1;
	return 1;
}

static void log_info_of(const struct bulk_row *p, struct meta_page_info *info)
{
	memset(info, 0, sizeof(*info));
	info->id = p->id;
	info->pool_id = p->pool_id;
	memcpy(info->name, p->name, p->name_len);
	info->slot = p->slot;
	info->length = p->length;
	info->has_checksum = p->has_checksum;
	info->checksum = p->checksum;
	info->mtime_ns = p->mtime_ns;
	info->atime_ns = p->atime_ns;
	info->gen = gen_of_column(p->gen);
	info->version = version_of_column(p->gen);
	info->committed = 1;
}

/* The pool's rows and its pages in the log, merged in id order. */
static int sq_iter_pages(struct store *base, uint32_t pool_id, uint64_t after, meta_page_cb cb,
                         void *arg)
{
	struct sqlite_store *s = (struct sqlite_store *)base;
	struct store_log_cursor cur = {0};
	struct bulk_row *lp = NULL;
	struct meta_page_info info;
	sqlite3_stmt *st = NULL;
	int rc, ret = 0, lhave = 0, rhave;

	pthread_mutex_lock(&s->db_lock); /* (between two batches of the journal) */
	/* prepared once: a listing calls this for every 4 KiB of entries */
	st = stmt(s, ST_ITER);
	rc = st ? SQLITE_OK : sqlite3_errcode(s->db);
	if (rc == SQLITE_OK) {
		sqlite3_bind_int64(st, 1, pool_id);
		sqlite3_bind_int64(st, 2, (sqlite3_int64)after);
	}
	if (s->log && rc == SQLITE_OK && (ret = store_log_ready(s->log)) == 0) {
		if (!(lp = malloc(sizeof(*lp))))
			ret = -ENOMEM;
		store_log_cursor_init(&cur, s->log, pool_id, after);
		if (ret == 0 && (lhave = store_log_next(&cur, lp)) < 0)
			ret = lhave;
	}
	rhave = rc == SQLITE_OK && ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW;
	while (ret == 0 && (rhave || lhave > 0)) {
		if (rhave && (lhave <= 0 || (uint64_t)sqlite3_column_int64(st, 0) < lp->id)) {
			if (row_info(st, pool_id, &info))
				ret = cb(arg, &info);
			rhave = ret == 0 && (rc = sqlite3_step(st)) == SQLITE_ROW;
		} else {
			log_info_of(lp, &info);
			ret = cb(arg, &info);
			if (ret == 0 && (lhave = store_log_next(&cur, lp)) < 0)
				ret = lhave;
		}
	}
	if (rc == SQLITE_ROW)
		rc = SQLITE_OK;
	if (st) {
		sqlite3_reset(st);
		sqlite3_clear_bindings(st);
	}
	store_log_cursor_free(&cur);
	free(lp);
	pthread_mutex_unlock(&s->db_lock);
	if (ret)
		return ret;
	return rc == SQLITE_DONE || rc == SQLITE_OK ? 0 : sql_errno(rc);
}

/* The daemon lock: flock on PATH.lock (open.c's store_index_lock), released by
 * the kernel when the process dies. */
static int sq_lock(struct store *base, int exclusive, char *err, size_t errlen)
{
	struct sqlite_store *s = (struct sqlite_store *)base;

	(void)exclusive; /* one daemon per SQLite index */
	if (s->lock_fd >= 0)
		return 0; /* taken at open */
	return store_index_lock(s->path, &s->lock_fd, err, errlen);
}

static const struct store_ops sqlite_ops = {
	.close = sq_close,
	.lock = sq_lock,
	.get_setting = sq_get_setting,
	.set_setting = sq_set_setting,
	.load = sq_load,
	.estimate = sq_estimate,
	.begin = sq_begin,
	.apply = sq_apply,
	.commit = sq_commit,
	.rollback = sq_rollback,
	.iter_pages = sq_iter_pages,
};

/* What a path that is not a regular file is, for messages. */
static const char *file_kind(mode_t mode)
{
	return S_ISDIR(mode)    ? "a directory"
	       : S_ISBLK(mode)  ? "a block device"
	       : S_ISCHR(mode)  ? "a character device"
	       : S_ISFIFO(mode) ? "a pipe"
	       : S_ISSOCK(mode) ? "a socket"
	                        : "not a regular file";
}

int store_sqlite_open(const char *path, int power, int read_only, struct store **out, char *err,
                      size_t errlen)
{
	struct sqlite_store *s;
	int flags =
		(read_only ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE) |
		SQLITE_OPEN_NOMUTEX;
	int rc;
	struct stat st;

	/* Before anything opens it: SQLite would write its header into a
	 * device (a --meta typo naming a disk) and the lock file beside it. */
	if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
		snprintf(err, errlen, "index %s is %s, not a file: give --meta the path of a file",
		         path, file_kind(st.st_mode));
		return -EINVAL;
	}
	s = calloc(1, sizeof(*s));
	if (!s || !(s->path = strdup(path))) {
		free(s);
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	s->base.ops = &sqlite_ops;
	s->base.engine = STORE_SQLITE;
	s->read_only = read_only;
	s->lock_fd = -1;
	pthread_mutex_init(&s->db_lock, NULL);
	/* The daemon lock first: a daemon holds the file's SQLite locks for
	 * as long as it runs, so asking SQLite would wait and then fail
	 * without saying who holds it. (A missing index opened read-only
	 * fails below; no lock file is made for it.) */
	if ((!read_only || access(path, F_OK) == 0) &&
	    (rc = store_index_lock(path, &s->lock_fd, err, errlen)) < 0)
		goto fail;
	rc = sqlite3_open_v2(path, &s->db, flags, store_gather_vfs());
	if (rc != SQLITE_OK) {
		snprintf(err, errlen, "cannot open index %s: %s", path,
		         s->db ? sqlite3_errmsg(s->db) : sqlite3_errstr(rc));
		rc = sql_errno(rc);
		goto fail;
	}
	sqlite3_extended_result_codes(s->db, 0);
	sqlite3_busy_timeout(s->db, 5000);
	if (!read_only) {
		/* Before the first access, so that no -shm is used (header). */
		exec(s, "PRAGMA locking_mode=EXCLUSIVE");
		if ((rc = check_foreign(s, err, errlen)) < 0)
			goto fail;
		rc = exec(s, "PRAGMA journal_mode=WAL");
		if (rc < 0) {
			snprintf(err, errlen,
			         "index %s cannot be opened (%s); if it is damaged run 'pagefs "
			         "fsck', "
			         "or move it away to start a new index",
			         path, sqlite3_errmsg(s->db));
			goto fail;
		}
		exec(s, power ? "PRAGMA synchronous=FULL" : "PRAGMA synchronous=OFF");
		exec(s, RUN_CACHE);
		exec(s, "PRAGMA temp_store=MEMORY");
	}
	rc = check_schema(s, err, errlen);
	if (rc < 0)
		goto fail;
	int has_log = 0;
	if (table_exists(s, "page_log", &has_log) == SQLITE_OK && has_log &&
	    !(s->log = store_log_new(s->db))) {
		snprintf(err, errlen, "out of memory");
		rc = -ENOMEM;
		goto fail;
	}
	*out = &s->base;
	return 0;
fail:
	sq_close(&s->base);
	return rc < 0 ? rc : -EIO;
}
