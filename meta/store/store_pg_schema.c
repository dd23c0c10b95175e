/*
 * store_pg_schema.c - the PostgreSQL store's schema: creation, the
 * version check and migrations (run once by whichever daemon opens the
 * index first, under a transaction-scoped advisory lock), and two helpers
 * for tools: a scratch schema for the benchmark and the index's size.
 */
#include "meta/log.h"
#include "meta/store_pg.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PG_SCHEMA_VERSION 3
#define PG_SCHEMA_LOCK_CLASS 1885824628

/* Version 1. Later versions add steps to migrate[] rather than edit this. */
static const char schema_sql[] =
	"CREATE TABLE pagefs_settings(key text PRIMARY KEY, value text NOT NULL);"
	"CREATE TABLE pagefs_ranks(rank bigint PRIMARY KEY);"
	"CREATE TABLE pagefs_pools(id bigint PRIMARY KEY, rank bigint NOT NULL, ns text NOT NULL,"
	" slot_size bigint NOT NULL, capacity bigint NOT NULL, UNIQUE(rank, ns));"
	"CREATE TABLE pagefs_pages(id bigint PRIMARY KEY, pool bigint NOT NULL,"
	" name bytea NOT NULL, slot bigint NOT NULL, length bigint NOT NULL, checksum bigint,"
	" mtime bigint NOT NULL, atime bigint NOT NULL, gen bigint NOT NULL,"
	" UNIQUE(pool, name), UNIQUE(pool, slot));"
	"CREATE INDEX pagefs_pages_pool_id ON pagefs_pages(pool, id);";

/* migrate[v]: the SQL that takes a version-v schema to v + 1. A new index
 * is made at version 1 and migrated, so every step runs in every test. */
static const char *const migrate[PG_SCHEMA_VERSION + 1] = {
	/* 1 -> 2: several daemons (nodes) on one index; docs/DESIGN.md. */
	[1] = "CREATE TABLE pagefs_nodes(id bigserial PRIMARY KEY, host text NOT NULL,"
	      " pid bigint NOT NULL, started timestamptz NOT NULL DEFAULT now(),"
	      " lease_until timestamptz NOT NULL, acked xid8 NOT NULL DEFAULT '0');"
	      "CREATE TABLE pagefs_chunks(pool bigint NOT NULL, chunk bigint NOT NULL,"
	      " node bigint NOT NULL REFERENCES pagefs_nodes(id) ON DELETE CASCADE,"
	      " PRIMARY KEY(pool, chunk));"
	      "CREATE TABLE pagefs_pins(node bigint NOT NULL REFERENCES pagefs_nodes(id)"
	      " ON DELETE CASCADE, pool bigint NOT NULL, slot bigint NOT NULL,"
	      " PRIMARY KEY(node, pool, slot));"
	      "CREATE TABLE pagefs_changes(seq bigserial PRIMARY KEY,"
	      " xid xid8 NOT NULL DEFAULT pg_current_xact_id(), node bigint, pool bigint,"
	      " page_id bigint, freed_slot bigint);"
	      "CREATE INDEX pagefs_changes_xid ON pagefs_changes(xid);"
	      "CREATE INDEX pagefs_changes_freed ON pagefs_changes(pool, freed_slot)"
	      " WHERE freed_slot IS NOT NULL;"
	      "CREATE SEQUENCE pagefs_page_ids INCREMENT 1048576;"
	      "SELECT setval('pagefs_page_ids', coalesce((SELECT max(id) FROM pagefs_pages), 0) + "
	      "1,"
	      " false);"
	      "CREATE SEQUENCE pagefs_pool_ids INCREMENT 64;"
	      "SELECT setval('pagefs_pool_ids', coalesce((SELECT max(id) FROM pagefs_pools), 0) + "
	      "1,"
	      " false);"
	      "CREATE FUNCTION pagefs_page_change() RETURNS trigger LANGUAGE plpgsql AS $$"
	      " DECLARE n bigint := NULLIF(current_setting('pagefs.node', true), '')::bigint;"
	      " BEGIN"
	      "  IF TG_OP = 'DELETE' THEN"
	      "   INSERT INTO pagefs_changes(node, pool, page_id, freed_slot)"
	      "    VALUES (n, OLD.pool, OLD.id, OLD.slot);"
	      "  ELSIF TG_OP = 'INSERT' THEN"
	      "   INSERT INTO pagefs_changes(node, pool, page_id) VALUES (n, NEW.pool, NEW.id);"
	      "  ELSE"
	      "   INSERT INTO pagefs_changes(node, pool, page_id, freed_slot) VALUES (n, NEW.pool,"
	      "    NEW.id, CASE WHEN OLD.slot <> NEW.slot THEN OLD.slot END);"
	      "  END IF;"
	      "  RETURN NULL;"
	      " END $$;"
	      "CREATE TRIGGER pagefs_pages_change AFTER INSERT OR DELETE OR UPDATE OF name, slot,"
	      " length, checksum, mtime ON pagefs_pages FOR EACH ROW"
	      " EXECUTE FUNCTION pagefs_page_change();"
	      "CREATE FUNCTION pagefs_pool_change() RETURNS trigger LANGUAGE plpgsql AS $$"
	      " BEGIN"
	      "  INSERT INTO pagefs_changes(node, pool) VALUES"
	      "   (NULLIF(current_setting('pagefs.node', true), '')::bigint, -1);"
	      "  RETURN NULL;"
	      " END $$;"
	      "CREATE TRIGGER pagefs_pools_change AFTER INSERT OR DELETE OR UPDATE ON pagefs_pools"
	      " FOR EACH STATEMENT EXECUTE FUNCTION pagefs_pool_change();"
	      "CREATE TRIGGER pagefs_ranks_change AFTER INSERT OR DELETE ON pagefs_ranks"
	      " FOR EACH STATEMENT EXECUTE FUNCTION pagefs_pool_change();",
	/* 2 -> 3: chunk handover; a node that finds no chunk asks for one
	 * (renewed while it waits; stale after a few seconds). Version 3 also
	 * means the pool removal protocol (a retired pool row has capacity
	 * -node; commits and leases take the pool's advisory lock), which a
	 * version-2 binary would not follow: it refuses the index. */
	[2] = "CREATE TABLE pagefs_wants(node bigint NOT NULL REFERENCES pagefs_nodes(id)"
	      " ON DELETE CASCADE, pool bigint NOT NULL, since timestamptz NOT NULL"
	      " DEFAULT now(), PRIMARY KEY(node, pool));",
};

/* ---- schema ---- */

static int schema_error(struct pg_store *s, char *err, size_t errlen, const char *what)
{
	snprintf(err, errlen, "index %s: %s: %s", s->display, what,
	         PQerrorMessage(s->conn)[0] ? PQerrorMessage(s->conn) : "unknown error");
	err[strcspn(err, "\n")] = '\0';
	return PQstatus(s->conn) == CONNECTION_OK ? -EIO : -ECONNREFUSED;
}

static int get_version(struct pg_store *s, int *version)
{
	char ver[32];
	int rc = s->base.ops->get_setting(&s->base, "schema_version", ver, sizeof(ver));

	*version = rc == 0 ? atoi(ver) : 0;
	return rc;
}

/* Creates the schema in an empty database, or checks and migrates an
 * existing one, under a transaction-scoped advisory lock so that
 * several daemons starting at once do it once. */
int store_pg_check_schema(struct pg_store *s, char *err, size_t errlen)
{
	int version = 0, exists, rc;
	char sql[128];

	if (store_pg_exec(s, "BEGIN") < 0 ||
	    store_pg_exec(
		    s,
		    "SELECT pg_advisory_xact_lock(" PG_STR(
			    PG_SCHEMA_LOCK_CLASS) ", hashtext(coalesce(current_schema(), '')))") <
	            0)
		return schema_error(s, err, errlen, "cannot lock the schema");
	PGresult *res = PQexec(s->conn, "SELECT to_regclass('pagefs_settings') IS NOT NULL,"
	                                " current_schema() IS NULL");
	if (PQresultStatus(res) != PGRES_TUPLES_OK || PQntuples(res) != 1) {
		PQclear(res);
		rc = schema_error(s, err, errlen, "cannot read the catalog");
		goto fail;
	}
	exists = PQgetvalue(res, 0, 0)[0] == 't';
	int no_schema = PQgetvalue(res, 0, 1)[0] == 't';
	PQclear(res);
	if (!exists) {
		if (no_schema) {
			snprintf(err, errlen,
			         "index %s: the search_path names no existing schema; create it "
			         "(CREATE SCHEMA) or fix options=-csearch_path in the URI",
			         s->display);
			rc = -ENOENT;
			goto fail;
		}
		if (s->read_only) {
			snprintf(err, errlen,
			         "index %s has no pagefs tables and the open is read-only; mount "
			         "it read-write once to create them",
			         s->display);
			rc = -EROFS;
			goto fail;
		}
		if (store_pg_exec(s, schema_sql) < 0 ||
		    store_pg_exec(s, "INSERT INTO pagefs_settings VALUES('schema_version','1')") <
		            0) {
			rc = schema_error(s, err, errlen, "cannot create the pagefs tables");
			goto fail;
		}
		log_info("index %s: created the pagefs tables", s->display);
		version = 1;
	} else if (get_version(s, &version) < 0 || version <= 0) {
		snprintf(err, errlen,
		         "index %s has pagefs tables but no schema version; check it with "
		         "'pagefs fsck'",
		         s->display);
		rc = -EIO;
		goto fail;
	} else if (version > PG_SCHEMA_VERSION) {
		snprintf(err, errlen,
		         "index %s has schema version %d, newer than this pagefs understands "
		         "(%d): another node upgraded it; upgrade pagefs on this node",
		         s->display, version, PG_SCHEMA_VERSION);
		rc = -EPROTO;
		goto fail;
	}
	if (version < PG_SCHEMA_VERSION) {
		if (s->read_only) {
			snprintf(err, errlen,
			         "index %s has schema version %d and needs migrating to %d; "
			         "open it read-write once",
			         s->display, version, PG_SCHEMA_VERSION);
			rc = -EROFS;
			goto fail;
		}
		for (int v = version; v < PG_SCHEMA_VERSION; v++) {
			if (!migrate[v] || store_pg_exec(s, migrate[v]) < 0) {
				rc = schema_error(s, err, errlen, "migration failed");
				goto fail;
			}
		}
		snprintf(sql, sizeof(sql),
		         "UPDATE pagefs_settings SET value='%d' WHERE key='schema_version'",
		         PG_SCHEMA_VERSION);
		if (store_pg_exec(s, sql) < 0) {
			rc = schema_error(s, err, errlen, "migration failed");
			goto fail;
		}
		log_info("index %s: migrated schema %d -> %d", s->display, version,
		         PG_SCHEMA_VERSION);
	}
	if (store_pg_exec(s, "COMMIT") < 0)
		return schema_error(s, err, errlen, "cannot commit the schema");
	return 0;
fail:
	store_pg_exec(s, "ROLLBACK");
	return rc;
}

int meta_pg_schema(const char *uri, const char *schema, int create, char *out, size_t outlen,
                   char *err, size_t errlen)
{
	struct pg_store tmp = {.uri = (char *)uri};
	char sql[160], shown[1024];
	int rc = 0;

	meta_uri_display(uri, shown, sizeof(shown));
	if (!*schema || strspn(schema, "abcdefghijklmnopqrstuvwxyz0123456789_") != strlen(schema) ||
	    strlen(schema) > 60) {
		snprintf(err, errlen, "'%s' is not a schema name for pagefs ([a-z0-9_])", schema);
		return -EINVAL;
	}
	tmp.conn = store_pg_connect(&tmp);
	if (!tmp.conn || PQstatus(tmp.conn) != CONNECTION_OK) {
		const char *msg = tmp.conn ? PQerrorMessage(tmp.conn) : "out of memory";
		snprintf(err, errlen, "cannot connect to %s: %.*s", shown, (int)strcspn(msg, "\n"),
		         msg);
		PQfinish(tmp.conn);
		return -ECONNREFUSED;
	}
	snprintf(sql, sizeof(sql),
	         create ? "CREATE SCHEMA %s"
	                : "SET client_min_messages = warning; DROP SCHEMA %s CASCADE",
	         schema);
	PGresult *res = PQexec(tmp.conn, sql);
	if (PQresultStatus(res) != PGRES_COMMAND_OK) {
		snprintf(err, errlen, "%s on %s: %s", sql, shown, PQresultErrorMessage(res));
		err[strcspn(err, "\n")] = '\0';
		rc = -EIO;
	}
	PQclear(res);
	PQfinish(tmp.conn);
	if (rc == 0 && create && out &&
	    snprintf(out, outlen, "%s%coptions=-csearch_path%%3D%s", uri,
	             strchr(uri, '?') ? '&' : '?', schema) >= (int)outlen)
		rc = -ENAMETOOLONG;
	return rc;
}

int meta_pg_index_bytes(const char *uri, uint64_t *bytes, char *err, size_t errlen)
{
	struct pg_store tmp = {.uri = (char *)uri};
	int rc = 0;

	tmp.conn = store_pg_connect(&tmp);
	if (!tmp.conn || PQstatus(tmp.conn) != CONNECTION_OK) {
		snprintf(err, errlen, "cannot connect: %s",
		         tmp.conn ? PQerrorMessage(tmp.conn) : "out of memory");
		PQfinish(tmp.conn);
		return -ECONNREFUSED;
	}
	PGresult *res = PQexec(tmp.conn, "SELECT coalesce(sum(pg_total_relation_size(c.oid)), 0)"
	                                 " FROM pg_class c JOIN pg_namespace n ON n.oid ="
	                                 " c.relnamespace WHERE n.nspname = current_schema()"
	                                 " AND c.relkind = 'r' AND c.relname LIKE 'pagefs_%'");
	if (PQresultStatus(res) == PGRES_TUPLES_OK && PQntuples(res) == 1) {
		*bytes = strtoull(PQgetvalue(res, 0, 0), NULL, 10);
	} else {
		snprintf(err, errlen, "%s", PQresultErrorMessage(res));
		rc = -EIO;
	}
	PQclear(res);
	PQfinish(tmp.conn);
	return rc;
}
