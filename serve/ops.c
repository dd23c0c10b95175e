/*
 * ops.c - the operator's routes on every HTTP listener of pagefs:
 * GET /metrics (Prometheus text format 0.0.4), GET /health and GET
 * /ready, and the listener's own request latency by route.
 *
 * /health says the process answers (200 {"status":"ok"}); /ready says
 * it can serve: the index loaded (a listener exists only after it is),
 * the store answering (the last index transaction succeeded, the node
 * not fenced) and, for a mount, the mount serving; otherwise 503
 * {"status":"unavailable","reason":"..."}.
 */
#include "serve/serve.h"

#include "meta/hist.h"
#include "meta/metrics.h"
#include "serve/body.h"

#include <stdlib.h>
#include <string.h>

/* Route labels of pagefs_http_request_duration_seconds. */
static const char *const route_names[] = {
	"initialize",
	"exists",
	"reserve_and_allocate_page_indices",
	"confirm_write",
	"delete_keys",
	"clear",
	"get_page_indices",
	"metrics",
	"health",
	"ready",
	"other",
};
#define NROUTES (sizeof(route_names) / sizeof(route_names[0]))

static struct hist route_hist[NROUTES] = {[0 ... NROUTES - 1] = {.bounds = &hist_latency_ns}};

/* The route label of url: "/metrics", "/{rank}/exists", ... */
static size_t route_of(const char *url)
{
	const char *last = strrchr(url, '/');

	if (!last)
		return NROUTES - 1;
	for (size_t i = 0; i < NROUTES - 1; i++) {
		if (strcmp(last + 1, route_names[i]) != 0)
			continue;
		/* the operator's routes sit at the root, the protocol's under a rank */
		if ((i >= 7) == (last == url))
			return i;
	}
	return NROUTES - 1;
}

void serve_ops_observe(const char *url, uint64_t ns)
{
	hist_observe(&route_hist[route_of(url)], ns);
}

static void http_metrics_write(FILE *out)
{
	char labels[96];

	hist_family(out, "pagefs_http_request_duration_seconds", "histogram",
	            "Time to answer an HTTP request, by route.");
	for (size_t i = 0; i < NROUTES; i++) {
		snprintf(labels, sizeof(labels), "route=\"%s\"", route_names[i]);
		hist_write(out, "pagefs_http_request_duration_seconds", labels, &route_hist[i]);
	}
}

static void answer_metrics(struct meta *m, const struct serve_ops *ops, struct out *o)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	if (!f) {
		o->oom = 1;
		return;
	}
	meta_metrics_write(m, f);
	if (ops && ops->metrics)
		ops->metrics(ops->arg, f);
	http_metrics_write(f);
	if (fclose(f) != 0 || !buf) {
		free(buf);
		o->oom = 1;
		return;
	}
	free(o->buf);
	o->buf = buf;
	o->len = len;
	o->cap = len;
	o->status = 200;
	o->type = "text/plain; version=0.0.4; charset=utf-8";
}

static void answer_ready(struct meta *m, const struct serve_ops *ops, struct out *o)
{
	char why[256];
	int rc = meta_metrics_ready(m, why, sizeof(why));

	if (rc == 0 && ops && ops->ready)
		rc = ops->ready(ops->arg, why, sizeof(why));
	o->len = 0;
	if (rc == 0) {
		o->status = 200;
		out_str(o, "{\"status\":\"ready\"}");
		return;
	}
	o->status = 503;
	out_str(o, "{\"status\":\"unavailable\",\"reason\":");
	out_jstr(o, why);
	out_str(o, "}");
}

int serve_ops_answer(struct meta *m, const struct serve_ops *ops, const char *url,
                     const char *method, struct out *o)
{
	int which = strcmp(url, "/metrics") == 0  ? 0
	            : strcmp(url, "/health") == 0 ? 1
	            : strcmp(url, "/ready") == 0  ? 2
	                                          : -1;

	if (which < 0)
		return 0;
	if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0) {
		o->status = 405;
		out_str(o, "{\"detail\":\"Method Not Allowed: use GET\"}");
		return 1;
	}
	if (which == 0) {
		answer_metrics(m, ops, o);
	} else if (which == 1) {
		o->status = 200;
		out_str(o, "{\"status\":\"ok\"}");
	} else {
		answer_ready(m, ops, o);
	}
	return 1;
}
