/*
 * serve.h - the mini_3fs_metadata_server HTTP protocol over a meta handle.
 *
 * serve/ is a front end like fs/: it parses requests (libmicrohttpd,
 * yajl), calls meta_keys_*() and turns the answers into the replies
 * SGLang's Hf3fsGlobalMetadataClient expects. It keeps no index state.
 */
#ifndef PAGEFS_SERVE_H
#define PAGEFS_SERVE_H

#include "meta/meta.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

struct serve; /* opaque: one listening server */

#define SERVE_DEFAULT_PORT 18000 /* the Python server's default */
#define SERVE_MAX_BODY (64u << 20)
#define SERVE_MAX_KEYS 1000000

/*
 * Parses "ADDR:PORT", "ADDR" or ":PORT" (IPv4; ADDR defaults to 127.0.0.1,
 * PORT to 18000). 0 or -EINVAL.
 */
int serve_parse_listen(const char *s, char *addr, size_t addrlen, int *port);

/*
 * Starts serving on addr:port with `threads` worker threads (the caller
 * chooses; below 1 is 1). The meta handle must outlive the server.
 * Returns 0, or a negative errno with a message in err. The bound port is
 * in *bound (useful with port 0).
 */
int serve_start(struct meta *m, const char *addr, int port, int threads, struct serve **out,
                int *bound, char *err, size_t errlen);
/*
 * Answers one request as the server would, without a socket (tests and
 * fuzz_serve call it): url such as "/0/exists", method such as "POST",
 * body of len bytes (not NUL-terminated; NULL with len 0 is an empty
 * body). Sets *status and *reply to a malloc'd JSON text of *reply_len
 * bytes that the caller frees (NULL for 204). 0, or -ENOMEM (no reply).
 */
int serve_request(struct meta *m, const char *url, const char *method, const char *body, size_t len,
                  unsigned *status, char **reply, size_t *reply_len);
/* Whether key-list bodies take the fast path (serve/flat.h; on by
 * default). Tests turn it off to compare the replies of both paths. */
void serve_set_fast_path(int on);
/*
 * The operator's routes on a listener (serve/ops.c): GET /metrics (the
 * Prometheus text format: the engine's families, then what metrics adds,
 * then the listener's HTTP latency by route), GET /health (200 while the
 * process answers) and GET /ready (200, or 503 with the reason: the
 * engine's meta_metrics_ready, then ready's). All hooks may be NULL.
 */
struct serve_ops {
	void (*metrics)(void *arg, FILE *out);
	int (*ready)(void *arg, char *why, size_t len); /* 0: ready */
	void *arg;
	int ops_only; /* 1: no 3FS protocol routes (mount --metrics) */
};

/* serve_start with the operator's routes configured by ops (copied; NULL:
 * the defaults, protocol routes on). */
int serve_start_ops(struct meta *m, const char *addr, int port, int threads,
                    const struct serve_ops *ops, struct serve **out, int *bound, char *err,
                    size_t errlen);
/* Answers GET /metrics, /health or /ready into o: 1 if url is one of
 * them, else 0 (serve/ops.c). */
struct out;
int serve_ops_answer(struct meta *m, const struct serve_ops *ops, const char *url,
                     const char *method, struct out *o);
/* Records one request's time for route url (pagefs_http_request_duration_seconds). */
void serve_ops_observe(const char *url, uint64_t ns);

/* Stops accepting, finishes requests in flight, frees the server. */
void serve_stop(struct serve *s);

#endif
