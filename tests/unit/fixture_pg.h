/*
 * fixture_pg.h - the unit fixture on a PostgreSQL index: a schema of its
 * own per test on the server PAGEFS_TEST_PG_URI names (scripts/test.sh
 * starts a private one), dropped at the end; without the variable the
 * test is skipped with a message. pg_setup sets fx.cfg.uri and opens
 * nothing; pg_teardown closes the engine too.
 */
#ifndef PAGEFS_TEST_FIXTURE_PG_H
#define PAGEFS_TEST_FIXTURE_PG_H

#include "fixture.h"

#include <libpq-fe.h>
#include <stdlib.h>

static char pg_schema[64] __attribute__((unused));
static char pg_uri[1024] __attribute__((unused));

/* An admin connection (not named like pagefs's, so terminate spares it). */
static inline PGconn *admin(void)
{
	const char *base = getenv("PAGEFS_TEST_PG_URI");
	const char *keys[] = {"application_name", "options", "dbname", NULL};
	const char *vals[] = {"pagefs-unit-admin", "-cclient_min_messages=warning", base, NULL};
	PGconn *c = PQconnectdbParams(keys, vals, 1);

	cr_assert(c && PQstatus(c) == CONNECTION_OK, "connect %s: %s", base,
	          c ? PQerrorMessage(c) : "out of memory");
	return c;
}

static inline void sql_ok(PGconn *c, const char *sql)
{
	PGresult *res = PQexec(c, sql);
	ExecStatusType st = PQresultStatus(res);

	cr_assert(st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK, "%s: %s", sql,
	          PQresultErrorMessage(res));
	PQclear(res);
}

/* Runs sql in the test's schema. */
static inline void schema_sql(const char *sql)
{
	char buf[1024];
	PGconn *c = admin();

	snprintf(buf, sizeof(buf), "SET search_path = %s; %s", pg_schema, sql);
	sql_ok(c, buf);
	PQfinish(c);
}

static inline void pg_setup(void)
{
	const char *base = getenv("PAGEFS_TEST_PG_URI");
	char sql[128];

	if (!base || !*base) /* (before the directory: a skip runs no fini) */
		cr_skip_test("PAGEFS_TEST_PG_URI is unset: no PostgreSQL server to test against "
		             "(scripts/test.sh starts one)");
	fx_init_dirs();
	snprintf(pg_schema, sizeof(pg_schema), "unit_%d_%ld", (int)getpid(), (long)time(NULL));
	PGconn *c = admin();
	snprintf(sql, sizeof(sql), "CREATE SCHEMA %s", pg_schema);
	sql_ok(c, sql);
	PQfinish(c);
	snprintf(pg_uri, sizeof(pg_uri), "%s%coptions=-csearch_path%%3D%s", base,
	         strchr(base, '?') ? '&' : '?', pg_schema);
	fx.cfg.uri = pg_uri;
}

static inline void pg_teardown(void)
{
	char sql[128];

	fx_teardown();
	if (!pg_schema[0])
		return;
	PGconn *c = admin();
	snprintf(sql, sizeof(sql), "DROP SCHEMA %s CASCADE", pg_schema);
	PQclear(PQexec(c, sql));
	PQfinish(c);
}

#endif
