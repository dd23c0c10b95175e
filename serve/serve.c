/*
 * serve.c - the seven routes of SGLang's mini_3fs_metadata_server over
 * libmicrohttpd (internal thread pool) and yajl (body.c), answering from
 * meta/.
 *
 *   POST /{rank}/initialize                        204
 *   POST /{rank}/exists                            {"exists": [bool]}
 *   POST /{rank}/reserve_and_allocate_page_indices {"indices": [[bool, int]]}
 *   POST /{rank}/confirm_write                     204
 *   POST /{rank}/delete_keys                       204
 *   POST /{rank}/clear                             204
 *   POST /{rank}/get_page_indices                  {"indices": [int|null]}
 *
 * Well-formed requests get the Python server's answers byte for byte
 * (orjson's compact JSON; 404 {"detail": "Rank R namespace 'NS' not
 * initialized. Please call /R/initialize first."}). Requests the Python
 * server would crash on (malformed JSON, missing fields, wrong types: its
 * 500, which the client retries) get FastAPI's validation answer instead,
 * 422 {"detail": [{"type", "loc", "msg", "input"}]}, and change nothing:
 * every field is checked before meta/ is called. A body over
 * SERVE_MAX_BODY or a batch over SERVE_MAX_KEYS keys gets 413.
 */
#include "serve/serve.h"
#include "meta/hist.h"
#include "meta/log.h"

#include "serve/body.h"
#include "serve/flat.h"

#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct serve {
	struct MHD_Daemon *d;
	struct meta *m;
	struct serve_ops ops;
};

/* serve_set_fast_path: set by tests, never while a server runs. */
static int fast_path = 1;

void serve_set_fast_path(int on)
{
	fast_path = on;
}

/* The largest announced Content-Length allocated for before the body comes. */
#define BODY_HINT_MAX (1u << 20)

/* A request body being received. */
struct body {
	char *buf;
	size_t len, cap;
	int too_big;
	uint64_t t0; /* hist_now_ns() at the request's start */
};

/* {"detail": "text"} with a status. */
static void out_detail(struct out *o, unsigned status, const char *text)
{
	o->status = status;
	o->len = 0;
	out_str(o, "{\"detail\":");
	out_jstr(o, text);
	out_str(o, "}");
}

/* FastAPI's 422: {"detail": [{"type", "loc": [loc0, field], "msg", "input"}]} */
static void out_invalid(struct out *o, const char *loc0, const char *field, const char *type,
                        const char *msg, yajl_val input)
{
	o->status = 422;
	o->len = 0;
	out_str(o, "{\"detail\":[{\"type\":");
	out_jstr(o, type);
	out_str(o, ",\"loc\":[");
	out_jstr(o, loc0);
	out_str(o, ",");
	out_jstr(o, field);
	out_str(o, "],\"msg\":");
	out_jstr(o, msg);
	out_str(o, ",\"input\":");
	out_value(o, input);
	out_str(o, "}]}");
}

static void out_not_initialized(struct out *o, long rank, const char *ns)
{
	char text[256];
	snprintf(text, sizeof(text),
	         "Rank %ld namespace '%s' not initialized. Please call /%ld/initialize first.",
	         rank, ns, rank);
	out_detail(o, 404, text);
}

static void out_errno(struct out *o, int err)
{
	char text[128];
	snprintf(text, sizeof(text), "index error: %s", strerror(-err));
	out_detail(o, err == -EROFS ? 503 : 500, text);
}

/* ---- request fields ---- */

/* The namespace field: default "kv". NULL (and a 422) if not a string. */
static const char *get_ns(yajl_val data, struct out *o)
{
	yajl_val v = body_field(data, "namespace");
	if (!v)
		return "kv";
	if (!YAJL_IS_STRING(v)) {
		out_invalid(o, "body", "namespace", "string_type", "Input should be a valid string",
		            v);
		return NULL;
	}
	return YAJL_GET_STRING(v);
}

/* The empty list an optional list field defaults to (never written). */
static struct yajl_val_s empty_list = {.type = yajl_t_array};

static size_t list_len(yajl_val v)
{
	return v->u.array.len;
}

static yajl_val list_at(yajl_val v, size_t i)
{
	return v->u.array.values[i];
}

/* A list field (required unless !required). NULL and a reply on error. */
static yajl_val get_list(yajl_val data, const char *field, int required, struct out *o)
{
	yajl_val v = body_field(data, field);

	if (!v && !required)
		return &empty_list;
	if (!v) {
		out_invalid(o, "body", field, "missing", "Field required", data);
		return NULL;
	}
	if (!YAJL_IS_ARRAY(v)) {
		out_invalid(o, "body", field, "list_type", "Input should be a valid list", v);
		return NULL;
	}
	if (list_len(v) > SERVE_MAX_KEYS) {
		char text[160];
		snprintf(text, sizeof(text), "%s has %zu entries; at most %u per request", field,
		         list_len(v), SERVE_MAX_KEYS);
		out_detail(o, 413, text);
		return NULL;
	}
	return v;
}

/* A [a, b] pair: its two items, or 0. */
static int pair(yajl_val e, yajl_val *a, yajl_val *b)
{
	if (!YAJL_IS_ARRAY(e) || list_len(e) != 2)
		return 0;
	*a = list_at(e, 0);
	*b = list_at(e, 1);
	return 1;
}

/* keys as a C array of strings; each element must be a string (or, with
 * pairs, a [key, prefix_key] pair). NULL and a reply on error. */
static const char **get_keys(yajl_val list, const char *field, int pairs, struct out *o)
{
	size_t n = list_len(list);
	const char **keys = malloc((n ? n : 1) * sizeof(*keys));

	if (!keys) {
		out_errno(o, -ENOMEM);
		return NULL;
	}
	for (size_t i = 0; i < n; i++) {
		yajl_val e = list_at(list, i), k = e, prefix;
		if (pairs && !pair(e, &k, &prefix)) {
			out_invalid(o, "body", field, "tuple_type",
			            "Input should be a valid tuple [key, prefix_key]", e);
			free(keys);
			return NULL;
		}
		if (!YAJL_IS_STRING(k)) {
			out_invalid(o, "body", field, "string_type",
			            "Input should be a valid string", k);
			free(keys);
			return NULL;
		}
		keys[i] = YAJL_GET_STRING(k);
	}
	return keys;
}

/* ---- routes ---- */

struct route_ctx {
	struct meta *m;
	long rank;
	yajl_val data;
	struct out *o;
};

/* The pool of (rank, ns); NULL-equivalent -1 with a 404 reply. */
static int pool_of(struct route_ctx *c, const char *ns, uint32_t *pool_id)
{
	int rc = meta_keys_pool(c->m, (int)c->rank, ns, pool_id);
	if (rc == -ENOENT)
		out_not_initialized(c->o, c->rank, ns);
	else if (rc < 0)
		out_errno(c->o, rc);
	return rc;
}

static void route_initialize(struct route_ctx *c)
{
	yajl_val np = body_field(c->data, "num_pages");
	const char *ns = get_ns(c->data, c->o);
	char msg[512];
	int differs;

	if (!ns)
		return;
	if (!np)
		return out_invalid(c->o, "body", "num_pages", "missing", "Field required", c->data);
	if (!YAJL_IS_INTEGER(np) || YAJL_GET_INTEGER(np) <= 0)
		return out_invalid(c->o, "body", "num_pages", "greater_than",
		                   "Input should be a positive integer", np);
	if (meta_check_ns(ns) < 0)
		return out_invalid(c->o, "body", "namespace", "string_pattern_mismatch",
		                   "String should match pattern '^[a-z0-9_]{1,64}$'", NULL);
	if (c->rank < 0 || c->rank > META_RANK_MAX)
		return out_invalid(c->o, "path", "rank", "less_than_equal",
		                   "Input should be less than or equal to 65535", NULL);
	msg[0] = '\0';
	int rc = meta_keys_initialize(c->m, (int)c->rank, ns, (uint64_t)YAJL_GET_INTEGER(np),
	                              &differs, msg, sizeof(msg));
	/* -EFBIG: a data file of num_pages slots is more than BACKING holds. */
	if (rc == -EMSGSIZE || rc == -EINVAL || rc == -EFBIG)
		return out_detail(c->o, 409, msg);
	if (rc < 0)
		return out_errno(c->o, rc);
	c->o->status = 204;
}

/* exists or get_page_indices of keys[0..n) in namespace ns, checked. */
static void answer_exists(struct route_ctx *c, const char *ns, const char *const *keys, size_t n,
                          int get)
{
	uint32_t pool;

	if (pool_of(c, ns, &pool) == 0) {
		void *res = malloc((n ? n : 1) * (get ? sizeof(int64_t) : 1));
		int rc = !res  ? -ENOMEM
		         : get ? meta_keys_get(c->m, pool, keys, n, res)
		               : meta_keys_exists(c->m, pool, keys, n, res);
		if (rc < 0) {
			out_errno(c->o, rc);
		} else {
			c->o->status = 200;
			out_reserve(c->o, 16 + n * (get ? 21 : 6)); /* "-9223372036854775808," */
			out_str(c->o, get ? "{\"indices\":[" : "{\"exists\":[");
			for (size_t i = 0; i < n; i++) {
				if (i)
					out_add(c->o, ",", 1);
				if (!get)
					out_str(c->o, ((uint8_t *)res)[i] ? "true" : "false");
				else if (((int64_t *)res)[i] < 0)
					out_str(c->o, "null");
				else
					out_int(c->o, ((int64_t *)res)[i]);
			}
			out_str(c->o, "]}");
		}
		free(res);
	}
}

static void route_exists(struct route_ctx *c, int get)
{
	yajl_val list = get_list(c->data, "keys", 1, c->o);
	const char *ns;
	const char **keys;

	if (!list || !(ns = get_ns(c->data, c->o)) || !(keys = get_keys(list, "keys", 0, c->o)))
		return;
	answer_exists(c, ns, keys, list_len(list), get);
	free(keys);
}

/* reserve_and_allocate_page_indices of keys[0..n) in namespace ns, checked. */
static void answer_reserve(struct route_ctx *c, const char *ns, const char *const *keys, size_t n)
{
	uint32_t pool;

	if (pool_of(c, ns, &pool) < 0)
		return;
	uint8_t *existed = malloc(n ? n : 1);
	int64_t *slot = malloc((n ? n : 1) * sizeof(*slot));
	int rc = existed && slot ? meta_keys_reserve(c->m, pool, keys, n, existed, slot) : -ENOMEM;
	if (rc < 0) {
		out_errno(c->o, rc);
	} else {
		c->o->status = 200;
		out_reserve(c->o, 16 + n * 29); /* ",[false,-9223372036854775808]" */
		out_str(c->o, "{\"indices\":[");
		for (size_t i = 0; i < n; i++) {
			out_str(c->o, i ? ",[" : "[");
			out_str(c->o, existed[i] ? "true," : "false,");
			out_int(c->o, slot[i]);
			out_add(c->o, "]", 1);
		}
		out_str(c->o, "]}");
	}
	free(existed);
	free(slot);
}

static void route_reserve(struct route_ctx *c)
{
	yajl_val list = get_list(c->data, "keys", 1, c->o);
	const char *ns;
	const char **keys;

	if (!list || !(ns = get_ns(c->data, c->o)) || !(keys = get_keys(list, "keys", 1, c->o)))
		return;
	answer_reserve(c, ns, keys, list_len(list));
	free(keys);
}

/* confirm_write of keys[0..n) at slots[0..n), releasing release[0..nrel),
 * in namespace ns, checked. */
static void answer_confirm(struct route_ctx *c, const char *ns, const char *const *keys,
                           const int64_t *slots, size_t n, const int64_t *release, size_t nrel)
{
	uint32_t pool;
	size_t ignored;

	if (pool_of(c, ns, &pool) < 0)
		return;
	int rc = meta_keys_confirm(c->m, pool, keys, slots, n, release, nrel, &ignored);
	if (rc < 0)
		out_errno(c->o, rc);
	else
		c->o->status = 204;
}

static void route_confirm(struct route_ctx *c)
{
	yajl_val w = get_list(c->data, "written_keys_to_confirm", 0, c->o), rel;
	const char *ns;
	const char **keys = NULL;
	int64_t *slots = NULL, *release = NULL;

	if (!w || !(rel = get_list(c->data, "pages_to_release", 0, c->o)) ||
	    !(ns = get_ns(c->data, c->o)))
		return;
	size_t n = list_len(w), nrel = list_len(rel);
	keys = malloc((n ? n : 1) * sizeof(*keys));
	slots = malloc((n ? n : 1) * sizeof(*slots));
	release = malloc((nrel ? nrel : 1) * sizeof(*release));
	if (!keys || !slots || !release) {
		out_errno(c->o, -ENOMEM);
		goto out;
	}
	for (size_t i = 0; i < n; i++) {
		yajl_val e = list_at(w, i), k, s;
		if (!pair(e, &k, &s) || !YAJL_IS_STRING(k) || !YAJL_IS_INTEGER(s)) {
			out_invalid(c->o, "body", "written_keys_to_confirm", "tuple_type",
			            "Input should be a valid tuple [key, page_index]", e);
			goto out;
		}
		keys[i] = YAJL_GET_STRING(k);
		slots[i] = (int64_t)YAJL_GET_INTEGER(s);
	}
	for (size_t i = 0; i < nrel; i++) {
		yajl_val e = list_at(rel, i);
		if (!YAJL_IS_INTEGER(e)) {
			out_invalid(c->o, "body", "pages_to_release", "int_type",
			            "Input should be a valid integer", e);
			goto out;
		}
		release[i] = (int64_t)YAJL_GET_INTEGER(e);
	}
	answer_confirm(c, ns, keys, slots, n, release, nrel);
out:
	free(keys);
	free(slots);
	free(release);
}

/* delete_keys of keys[0..n) in namespace ns, checked. */
static void answer_delete(struct route_ctx *c, const char *ns, const char *const *keys, size_t n)
{
	uint32_t pool;
	size_t deleted;

	if (pool_of(c, ns, &pool) == 0) {
		int rc = meta_keys_delete(c->m, pool, keys, n, &deleted);
		if (rc < 0)
			out_errno(c->o, rc);
		else
			c->o->status = 204;
	}
}

static void route_delete(struct route_ctx *c)
{
	yajl_val list = get_list(c->data, "keys", 1, c->o);
	const char *ns;
	const char **keys;

	if (!list || !(ns = get_ns(c->data, c->o)) || !(keys = get_keys(list, "keys", 0, c->o)))
		return;
	answer_delete(c, ns, keys, list_len(list));
	free(keys);
}

/* The routes, in the order of routes[]. */
enum route {
	ROUTE_INITIALIZE,
	ROUTE_EXISTS,
	ROUTE_RESERVE,
	ROUTE_CONFIRM,
	ROUTE_DELETE,
	ROUTE_CLEAR,
	ROUTE_GET,
};

/* A route on the fast path (flat.h): 1 if answered, 0 if the body needs
 * the general parse. body is changed only if answered. */
static int answer_flat(struct meta *m, long rank, int route, char *body, size_t len, struct out *o)
{
	int write = route == ROUTE_RESERVE || route == ROUTE_CONFIRM;
	struct flat f = {0};
	struct flat_write w = {0};
	int rc;

	if (write)
		rc = flat_parse_write(body, len, route == ROUTE_CONFIRM, SERVE_MAX_KEYS, &w);
	else if (route == ROUTE_EXISTS || route == ROUTE_GET || route == ROUTE_DELETE)
		rc = flat_parse(body, len, SERVE_MAX_KEYS, &f);
	else
		return 0;
	if (rc < 0) {
		out_errno(o, rc);
		return 1;
	}
	if (rc > 0)
		return 0;
	struct route_ctx c = {m, rank, NULL, o}; /* no tree: the answers take their fields */
	const char *ns = write ? w.ns : f.ns;
	ns = ns ? ns : "kv";
	if (route == ROUTE_RESERVE)
		answer_reserve(&c, ns, w.keys, w.n);
	else if (route == ROUTE_CONFIRM)
		answer_confirm(&c, ns, w.keys, w.slots, w.n, w.release, w.nrel);
	else if (route == ROUTE_DELETE)
		answer_delete(&c, ns, f.keys, f.n);
	else
		answer_exists(&c, ns, f.keys, f.n, route == ROUTE_GET);
	if (write)
		flat_write_free(&w);
	else
		flat_free(&f);
	return 1;
}

static void route_clear(struct route_ctx *c)
{
	const char *ns = get_ns(c->data, c->o);
	uint32_t pool;

	if (ns && pool_of(c, ns, &pool) == 0) {
		int rc = meta_keys_clear(c->m, pool);
		if (rc < 0)
			out_errno(c->o, rc);
		else
			c->o->status = 204;
	}
}

/* Parses a path rank as FastAPI's int does (optional sign, digits). */
static int parse_rank(const char *s, size_t len, long *out)
{
	char buf[24];
	char *end;

	if (len == 0 || len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = '\0';
	size_t i = (buf[0] == '-' || buf[0] == '+') ? 1 : 0;
	if (!buf[i])
		return -EINVAL;
	for (; buf[i]; i++)
		if (buf[i] < '0' || buf[i] > '9')
			return -EINVAL;
	errno = 0;
	*out = strtol(buf, &end, 10);
	return errno ? -EINVAL : 0;
}

static const char *const routes[] = {
	"initialize",       "exists",      "reserve_and_allocate_page_indices",
	"confirm_write",    "delete_keys", "clear",
	"get_page_indices",
};

/* Answers one request into o. body is len bytes (NULL: empty), which the
 * fast path may change; too_big: the body was over SERVE_MAX_BODY and is
 * not all there. */
static void handle(struct meta *m, const char *url, const char *method, char *body, size_t len,
                   int too_big, struct out *o)
{
	const char *slash = url[0] == '/' ? strchr(url + 1, '/') : NULL;
	int route = -1;
	long rank;

	if (slash) {
		for (size_t i = 0; i < sizeof(routes) / sizeof(routes[0]); i++)
			if (strcmp(slash + 1, routes[i]) == 0)
				route = (int)i;
	}
	if (route < 0 || slash == url + 1)
		return out_detail(o, 404, "Not Found");
	if (strcmp(method, "POST") != 0)
		return out_detail(o, 405, "Method Not Allowed");
	if (parse_rank(url + 1, (size_t)(slash - url - 1), &rank) < 0) {
		char in[64];
		snprintf(in, sizeof(in), "%.*s", (int)(slash - url - 1 < 60 ? slash - url - 1 : 60),
		         url + 1);
		struct yajl_val_s input = {.type = yajl_t_string, .u.string = in};
		out_invalid(o, "path", "rank", "int_parsing",
		            "Input should be a valid integer, unable to parse string as an integer",
		            &input);
		return;
	}
	if (too_big) {
		char text[96];
		snprintf(text, sizeof(text), "request body over %u bytes", SERVE_MAX_BODY);
		return out_detail(o, 413, text);
	}
	if (fast_path && body && answer_flat(m, rank, route, body, len, o))
		return;
	char jerr[160];
	size_t pos;
	yajl_val data = body_parse(body ? body : "", len, jerr, sizeof(jerr), &pos);
	if (!data) {
		o->status = 422;
		out_str(o, "{\"detail\":[{\"type\":\"json_invalid\",\"loc\":[\"body\",");
		out_fmt(o, "%zu],", pos);
		out_str(o, "\"msg\":\"JSON decode error\",\"input\":{},\"ctx\":{\"error\":");
		out_jstr(o, jerr);
		out_str(o, "}}]}");
		return;
	}
	if (!YAJL_IS_OBJECT(data)) {
		out_invalid(o, "body", "", "dict_type", "Input should be a valid dictionary", data);
		body_free(data);
		return;
	}
	struct route_ctx c = {m, rank, data, o};
	switch (route) {
	case ROUTE_INITIALIZE:
		route_initialize(&c);
		break;
	case ROUTE_EXISTS:
		route_exists(&c, 0);
		break;
	case ROUTE_RESERVE:
		route_reserve(&c);
		break;
	case ROUTE_CONFIRM:
		route_confirm(&c);
		break;
	case ROUTE_DELETE:
		route_delete(&c);
		break;
	case ROUTE_CLEAR:
		route_clear(&c);
		break;
	default:
		route_exists(&c, 1);
		break;
	}
	body_free(data);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	struct serve *sv = cls;
	struct body *b = *con_cls;
	struct out o = {0};
	struct MHD_Response *resp;
	enum MHD_Result ret;

	(void)version;
	if (!b) {
		if (!(b = calloc(1, sizeof(*b))))
			return MHD_NO;
		*con_cls = b;
		b->t0 = hist_now_ns();
		/* the body's buffer at once, at the size the client announced (a
		 * hint only: a body grows its buffer past it, up to the limit) */
		const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND,
		                                             MHD_HTTP_HEADER_CONTENT_LENGTH);
		char *end;
		unsigned long long want = cl ? strtoull(cl, &end, 10) : 0;
		if (want > 0 && want <= BODY_HINT_MAX && *end == '\0' && (b->buf = malloc(want)))
			b->cap = want;
		return MHD_YES;
	}
	if (*upload_size) {
		size_t n = *upload_size;
		*upload_size = 0;
		if (b->too_big || b->len + n > SERVE_MAX_BODY) {
			b->too_big = 1;
			return MHD_YES;
		}
		if (b->len + n > b->cap) {
			size_t c = b->cap ? b->cap : 4096;
			while (c < b->len + n)
				c *= 2;
			char *nb = realloc(b->buf, c);
			if (!nb)
				return MHD_NO;
			b->buf = nb;
			b->cap = c;
		}
		memcpy(b->buf + b->len, upload, n);
		b->len += n;
		return MHD_YES;
	}
	if (!serve_ops_answer(sv->m, &sv->ops, url, method, &o)) {
		if (sv->ops.ops_only)
			out_detail(&o, 404,
			           "Not Found: this listener serves /metrics, /health and /ready");
		else
			handle(sv->m, url, method, b->buf, b->len, b->too_big, &o);
	}
	serve_ops_observe(url, hist_now_ns() - b->t0);
	if (o.oom) {
		free(o.buf);
		return MHD_NO;
	}
	if (o.status == 204) {
		resp = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
	} else {
		resp = MHD_create_response_from_buffer(o.len, o.buf, MHD_RESPMEM_MUST_FREE);
		o.buf = NULL;
		if (resp)
			MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
			                        o.type ? o.type : "application/json");
	}
	free(o.buf);
	if (!resp)
		return MHD_NO;
	ret = MHD_queue_response(conn, o.status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	struct body *b = *con_cls;

	(void)cls;
	(void)conn;
	(void)toe;
	if (b) {
		free(b->buf);
		free(b);
		*con_cls = NULL;
	}
}

int serve_request(struct meta *m, const char *url, const char *method, const char *body, size_t len,
                  unsigned *status, char **reply, size_t *reply_len)
{
	struct out o = {0};
	char *copy = NULL; /* handle may write into the body */

	if (body && len <= SERVE_MAX_BODY && !(copy = malloc(len ? len : 1)))
		return -ENOMEM;
	if (copy)
		memcpy(copy, body, len);
	if (!serve_ops_answer(m, NULL, url, method, &o))
		handle(m, url, method, copy, len > SERVE_MAX_BODY ? 0 : len, len > SERVE_MAX_BODY,
		       &o);
	free(copy);
	if (o.oom) {
		free(o.buf);
		return -ENOMEM;
	}
	*status = o.status;
	if (o.status == 204) {
		free(o.buf);
		o.buf = NULL;
		o.len = 0;
	}
	*reply = o.buf;
	*reply_len = o.len;
	return 0;
}

int serve_parse_listen(const char *s, char *addr, size_t addrlen, int *port)
{
	const char *colon = strrchr(s, ':');
	struct in_addr ia;
	char a[64];
	long p = SERVE_DEFAULT_PORT;

	if (colon) {
		char *end;
		errno = 0;
		p = strtol(colon + 1, &end, 10);
		if (colon[1] == '\0' || *end || errno || p < 0 || p > 65535)
			return -EINVAL;
	}
	size_t alen = colon ? (size_t)(colon - s) : strlen(s);
	if (alen >= sizeof(a))
		return -EINVAL;
	memcpy(a, s, alen);
	a[alen] = '\0';
	if (!a[0])
		snprintf(a, sizeof(a), "127.0.0.1");
	if (inet_pton(AF_INET, a, &ia) != 1)
		return -EINVAL;
	snprintf(addr, addrlen, "%s", a);
	*port = (int)p;
	return 0;
}

int serve_start(struct meta *m, const char *addr, int port, int threads, struct serve **out,
                int *bound, char *err, size_t errlen)
{
	return serve_start_ops(m, addr, port, threads, NULL, out, bound, err, errlen);
}

int serve_start_ops(struct meta *m, const char *addr, int port, int threads,
                    const struct serve_ops *ops, struct serve **out, int *bound, char *err,
                    size_t errlen)
{
	struct sockaddr_in sa = {0};
	struct serve *sv = calloc(1, sizeof(*sv));

	if (!sv) {
		snprintf(err, errlen, "out of memory");
		return -ENOMEM;
	}
	sa.sin_family = AF_INET;
	sa.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		free(sv);
		snprintf(err, errlen, "'%s' is not an IPv4 address", addr);
		return -EINVAL;
	}
	sv->m = m;
	if (ops)
		sv->ops = *ops;
	sv->d = MHD_start_daemon(MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port,
	                         NULL, NULL, on_request, sv, MHD_OPTION_SOCK_ADDR, &sa,
	                         MHD_OPTION_THREAD_POOL_SIZE, (unsigned)(threads > 0 ? threads : 1),
	                         MHD_OPTION_NOTIFY_COMPLETED, on_completed, sv,
	                         MHD_OPTION_CONNECTION_LIMIT, 1024u, MHD_OPTION_CONNECTION_TIMEOUT,
	                         120u, MHD_OPTION_END);
	if (!sv->d) {
		free(sv);
		snprintf(err, errlen,
		         "cannot listen on %s:%d (in use, or not an address of this host); choose "
		         "another with %s ADDR:PORT",
		         addr, port, ops && ops->ops_only ? "--metrics" : "--listen/--http");
		return -EADDRINUSE;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(sv->d, MHD_DAEMON_INFO_BIND_PORT);
	*bound = di ? di->port : port;
	*out = sv;
	return 0;
}

void serve_stop(struct serve *sv)
{
	if (!sv)
		return;
	MHD_stop_daemon(sv->d);
	free(sv);
}
