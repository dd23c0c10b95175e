/*
 * cli_status_url.c - `pagefs status --url [http://]ADDR:PORT`: the pools
 * of a daemon that has no mount here (serve-meta, or a mount on another
 * node), read from its GET /metrics and GET /ready.
 *
 * One HTTP/1.0 request per route over a plain socket (the daemon's
 * libmicrohttpd closes the connection after the answer); the Prometheus
 * text is parsed for the pagefs_pool_* families only.
 */
#include "serve/serve.h"
#include "tools/cli_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <jansson.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define CMD "status"

/* The figures shown, in column order: family suffix, column, JSON key. */
static const struct {
	const char *family, *column, *key;
} cols[] = {
	{"pages", "PAGES", "pages"},
	{"bytes", "BYTES", "bytes"},
	{"capacity_bytes", "CAPACITY", "capacity_bytes"},
	{"slot_size_bytes", "SLOT", "slot_size"},
	{"free_slots", "FREE", "free_slots"},
	{"hits_total", "HITS", "hits"},
	{"misses_total", "MISSES", "misses"},
	{"evictions_total", "EVICT", "evictions"},
	{"checksum_failures_total", "CKSUM", "checksum_failures"},
	{"read_bytes_total", "READ", "bytes_read"},
	{"written_bytes_total", "WRITTEN", "bytes_written"},
};
#define NCOLS (sizeof(cols) / sizeof(cols[0]))

struct url_pool {
	unsigned rank;
	char ns[72];
	unsigned long long v[NCOLS];
};

/* GET path from addr:port. Returns the malloc'd body and the status in
 * *status, or NULL with errno-style message in err. */
static char *http_get(const char *addr, int port, const char *path, int *status, char *err,
                      size_t errlen)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	struct timeval tv = {10, 0};
	char req[256], *buf = NULL;
	size_t len = 0, cap = 0;
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	if (fd < 0 || inet_pton(AF_INET, addr, &sa.sin_addr) != 1) {
		snprintf(err, errlen, "%s", strerror(errno));
		goto fail;
	}
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		snprintf(err, errlen, "cannot connect to %s:%d: %s", addr, port, strerror(errno));
		goto fail;
	}
	int n = snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: %s\r\n\r\n", path, addr);
	if (write(fd, req, (size_t)n) != n) {
		snprintf(err, errlen, "cannot send to %s:%d: %s", addr, port, strerror(errno));
		goto fail;
	}
	for (;;) {
		if (len + 4096 + 1 > cap) {
			cap = cap ? cap * 2 : 65536;
			char *nb = realloc(buf, cap);
			if (!nb) {
				snprintf(err, errlen, "out of memory");
				goto fail;
			}
			buf = nb;
		}
		ssize_t r = read(fd, buf + len, cap - len - 1);
		if (r < 0 && errno == EINTR)
			continue;
		if (r < 0) {
			snprintf(err, errlen, "reading from %s:%d: %s", addr, port,
			         strerror(errno));
			goto fail;
		}
		if (r == 0)
			break;
		len += (size_t)r;
	}
	close(fd);
	fd = -1;
	if (!buf || sscanf(buf, "HTTP/1.%*d %d", status) != 1) {
		snprintf(err, errlen, "%s:%d did not answer HTTP", addr, port);
		goto fail;
	}
	buf[len] = '\0';
	char *body = strstr(buf, "\r\n\r\n");
	if (!body) {
		snprintf(err, errlen, "%s:%d sent no body", addr, port);
		goto fail;
	}
	memmove(buf, body + 4, strlen(body + 4) + 1);
	return buf;
fail:
	if (fd >= 0)
		close(fd);
	free(buf);
	return NULL;
}

/* The pool of (rank, ns) in *pools, added if new. NULL on ENOMEM. */
static struct url_pool *pool_of(struct url_pool **pools, size_t *n, unsigned rank, const char *ns)
{
	for (size_t i = 0; i < *n; i++)
		if ((*pools)[i].rank == rank && strcmp((*pools)[i].ns, ns) == 0)
			return &(*pools)[i];
	struct url_pool *np = realloc(*pools, (*n + 1) * sizeof(**pools));
	if (!np)
		return NULL;
	*pools = np;
	memset(&np[*n], 0, sizeof(np[*n]));
	np[*n].rank = rank;
	snprintf(np[*n].ns, sizeof(np[*n].ns), "%s", ns);
	return &np[(*n)++];
}

/* Reads the pagefs_pool_* samples of text into *pools. 0 or -ENOMEM. */
static int parse_pools(char *text, struct url_pool **pools, size_t *n)
{
	char *save = NULL;

	for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char family[64], ns[72];
		unsigned rank;
		unsigned long long v;

		if (strncmp(line, "pagefs_pool_", 12) != 0 ||
		    sscanf(line,
		           "pagefs_pool_%63[a-z_]{rank=\"%u\",namespace=\"%71[a-z0-9_]\"} %llu",
		           family, &rank, ns, &v) != 4)
			continue;
		for (size_t c = 0; c < NCOLS; c++) {
			if (strcmp(family, cols[c].family) != 0)
				continue;
			struct url_pool *p = pool_of(pools, n, rank, ns);
			if (!p)
				return -ENOMEM;
			p->v[c] = v;
		}
	}
	return 0;
}

static void print_json(const char *url, const char *ready, const struct url_pool *pools, size_t n)
{
	json_t *doc = json_object(), *arr = json_array(), *r = json_loads(ready, 0, NULL);

	json_object_set_new(doc, "url", json_string(url));
	json_object_set_new(doc, "ready", r ? r : json_null());
	for (size_t i = 0; i < n; i++) {
		json_t *o = json_object();
		json_object_set_new(o, "rank", json_integer(pools[i].rank));
		json_object_set_new(o, "namespace", json_string(pools[i].ns));
		for (size_t c = 0; c < NCOLS; c++)
			json_object_set_new(o, cols[c].key,
			                    json_integer((json_int_t)pools[i].v[c]));
		json_array_append_new(arr, o);
	}
	json_object_set_new(doc, "pools", arr);
	char *s = json_dumps(doc, JSON_COMPACT);
	printf("%s\n", s ? s : "{}");
	free(s);
	json_decref(doc);
}

int cli_status_url(const char *url, int json)
{
	char hostport[128], addr[64], err[256];
	int port, status = 0, ready_status = 0;
	const char *s = strncmp(url, "http://", 7) == 0 ? url + 7 : url;
	size_t len = strcspn(s, "/");

	if (len >= sizeof(hostport))
		return cli_usage_error(CMD, "--url '%s' is too long", url);
	memcpy(hostport, s, len);
	hostport[len] = '\0';
	if (!strchr(hostport, ':') || serve_parse_listen(hostport, addr, sizeof(addr), &port) < 0)
		return cli_usage_error(CMD,
		                       "--url '%s' is not [http://]IPV4ADDR:PORT (e.g. "
		                       "http://127.0.0.1:18000)",
		                       url);
	char *metrics = http_get(addr, port, "/metrics", &status, err, sizeof(err));
	if (!metrics)
		return cli_fail(CMD,
		                "%s: is a pagefs serve-meta or mount --http/--metrics listening "
		                "there?",
		                err);
	if (status != 200) {
		free(metrics);
		return cli_fail(CMD,
		                "%s:%d answered GET /metrics with %d: not a pagefs listener (or "
		                "an older pagefs)",
		                addr, port, status);
	}
	char *ready = http_get(addr, port, "/ready", &ready_status, err, sizeof(err));
	struct url_pool *pools = NULL;
	size_t n = 0;
	if (parse_pools(metrics, &pools, &n) < 0) {
		free(metrics);
		free(ready);
		free(pools);
		return cli_fail(CMD, "out of memory");
	}
	if (json) {
		print_json(url, ready ? ready : "null", pools, n);
	} else {
		printf("%s  %s\n", url, ready ? ready : "(no answer to /ready)");
		printf("%5s %-12s", "RANK", "NAMESPACE");
		for (size_t c = 0; c < NCOLS; c++)
			printf(" %12s", cols[c].column);
		printf("\n");
		for (size_t i = 0; i < n; i++) {
			printf("%5u %-12s", pools[i].rank, pools[i].ns);
			for (size_t c = 0; c < NCOLS; c++)
				printf(" %12llu", pools[i].v[c]);
			printf("\n");
		}
		if (!n)
			printf("(no pools)\n");
	}
	free(metrics);
	free(ready);
	free(pools);
	return CLI_OK;
}
