/*
 * store.c - choosing the store engine from a --meta URI, and the calls
 * every engine answers (dispatch through struct store_ops).
 *
 * "sqlite:PATH" or a bare PATH: the embedded SQLite file. "postgres://"
 * or "postgresql://": a PostgreSQL server, the URI handed to libpq as is
 * (user, password, host or Unix socket directory, database, options).
 * Messages never show a password: they use store_uri.display.
 */
#include "meta/store.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

/* Copies a PostgreSQL URI with the password (user:PASS@ and password=)
 * replaced by "***". */
static void mask_password(const char *uri, char *out, size_t len)
{
	const char *auth = strstr(uri, "://");
	size_t o = 0;

	auth = auth ? auth + 3 : uri;
	size_t host_end = strcspn(auth, "/?");
	const char *at = memchr(auth, '@', host_end);
	const char *colon = at ? memchr(auth, ':', (size_t)(at - auth)) : NULL;
	for (const char *p = uri; *p && o + 4 < len;) {
		if (colon && p == colon + 1) {
			o += (size_t)snprintf(out + o, len - o, "***");
			p = at;
			continue;
		}
		if ((p == uri || p[-1] == '?' || p[-1] == '&') && strncmp(p, "password=", 9) == 0) {
			o += (size_t)snprintf(out + o, len - o, "password=***");
			p += 9 + strcspn(p + 9, "&");
			continue;
		}
		out[o++] = *p++;
	}
	out[o < len ? o : len - 1] = '\0';
}

void meta_uri_display(const char *uri, char *buf, size_t len)
{
	if (strncmp(uri, "postgres://", 11) == 0 || strncmp(uri, "postgresql://", 13) == 0)
		mask_password(uri, buf, len);
	else
		snprintf(buf, len, "%s", uri);
}

int store_parse_uri(const char *uri, struct store_uri *out, char *err, size_t errlen)
{
	memset(out, 0, sizeof(*out));
	if (strncmp(uri, "postgres://", 11) == 0 || strncmp(uri, "postgresql://", 13) == 0) {
		out->engine = STORE_PG;
		out->target = uri;
		mask_password(uri, out->display, sizeof(out->display));
		return 0;
	}
	out->engine = STORE_SQLITE;
	if (strncmp(uri, "sqlite:", 7) == 0) {
		out->target = uri + 7;
	} else if (strstr(uri, "://")) {
		snprintf(err, errlen,
		         "metadata URI '%s' is not supported; use sqlite:PATH or "
		         "postgres://USER@HOST/DATABASE",
		         uri);
		return -EPROTONOSUPPORT;
	} else {
		out->target = uri;
	}
	if (!*out->target) {
		snprintf(err, errlen, "metadata URI '%s' names no file; use sqlite:PATH", uri);
		return -EINVAL;
	}
	snprintf(out->display, sizeof(out->display), "%s", out->target);
	return 0;
}

int store_open(const char *uri, int power, int read_only, struct store **out, char *err,
               size_t errlen)
{
	struct store_uri u;
	int rc = store_parse_uri(uri, &u, err, errlen);

	if (rc < 0)
		return rc;
	if (u.engine == STORE_PG)
		return store_pg_open(u.target, u.display, power, read_only, out, err, errlen);
	return store_sqlite_open(u.target, power, read_only, out, err, errlen);
}

void store_close(struct store *s)
{
	if (s)
		s->ops->close(s);
}

int store_lock(struct store *s, int exclusive, char *err, size_t errlen)
{
	return s->ops->lock(s, exclusive, err, errlen);
}

int store_get_setting(struct store *s, const char *key, char *buf, size_t len)
{
	return s->ops->get_setting(s, key, buf, len);
}

int store_set_setting(struct store *s, const char *key, const char *value)
{
	return s->ops->set_setting(s, key, value);
}

int store_load(struct store *s, const struct store_load_cb *cb, char *err, size_t errlen)
{
	return s->ops->load(s, cb, err, errlen);
}

uint64_t store_estimate(struct store *s)
{
	return s->ops->estimate(s);
}

int store_begin(struct store *s)
{
	return s->ops->begin(s);
}

int store_apply(struct store *s, struct rec *r)
{
	return s->ops->apply(s, r);
}

int store_commit(struct store *s)
{
	return s->ops->commit(s);
}

void store_rollback(struct store *s)
{
	s->ops->rollback(s);
}

int store_iter_pages(struct store *s, uint32_t pool_id, uint64_t after, meta_page_cb cb, void *arg)
{
	return s->ops->iter_pages(s, pool_id, after, cb, arg);
}
