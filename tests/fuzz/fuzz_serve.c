/*
 * fuzz_serve.c - libFuzzer target for the request handling of the 3FS
 * metadata protocol (serve/serve.c): the route and rank of the URL and
 * the JSON bodies of the seven routes, answered in-process by
 * serve_request() from a real index in a temporary directory, no socket.
 *
 * An input is one or more requests separated by NUL bytes, each "URL\n
 * BODY" ("GET URL\nBODY" for another method); without a newline the whole
 * request is the URL and the body is empty. The index lives across inputs
 * (pool 0:kv of 16 slots exists from the start) and is replaced by an
 * empty one every RESET_EVERY inputs, so state stays small.
 *
 * Every reply must be one the protocol allows: 204 without a body, 200
 * with the route's JSON (one answer per key), or a 4xx with a JSON
 * "detail"; never a 5xx (an index error on a well-formed request). The
 * operator's routes (/metrics, /health, /ready) answer as serve/ops.c
 * says. exists
 * and get_page_indices are answered twice, with and without the fast
 * path for key lists (serve/flat.h): the replies must be the same. The
 * body of every reserve and confirm is read both ways too
 * (flat_write_check.h): what the fast path for writes takes, body_parse
 * must read alike. And every body is read by both tiers of the fast
 * paths as each kind of body (flat_scan_check.h): what the scan takes,
 * the copy must take and read alike.
 */
#define FUZZ_NAME "fuzz_serve"
#include "tests/fuzz/fuzz_index.h"

#include "serve/serve.h"
#include "tests/fuzz/flat_scan_check.h"
#include "tests/fuzz/flat_write_check.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RESET_EVERY 2000

static struct fuzz_index fi;
static unsigned long inputs;

static void setup(void)
{
	unsigned status = 0;
	char *reply = NULL;
	size_t len = 0;
	const char *init = "{\"num_pages\": 16}";

	fuzz_index_open(&fi);
	CHECK(serve_request(fi.m, "/0/initialize", "POST", init, strlen(init), &status, &reply,
	                    &len) == 0 &&
	              status == 204,
	      "initializing 0:kv: %u", status);
	free(reply);
}

/* The number of entries of the request's list field, or -1. */
static long request_keys(const char *body, size_t len, const char *field)
{
	json_t *root = json_loadb(body, len, JSON_DECODE_ANY, NULL);
	json_t *list = json_object_get(root, field);
	long n = json_is_array(list) ? (long)json_array_size(list) : -1;

	json_decref(root);
	return n;
}

/* The operator's routes (serve/ops.c), which serve_request answers too:
 * 1 if url is one (its reply checked), else 0. GET /metrics is Prometheus
 * text; /health and /ready a JSON status, /ready 503 when not ready. */
static int check_ops_reply(const char *url, unsigned status, const char *reply, size_t rlen)
{
	int metrics = strcmp(url, "/metrics") == 0;

	if (!metrics && strcmp(url, "/health") != 0 && strcmp(url, "/ready") != 0)
		return 0;
	CHECK(reply && strlen(reply) == rlen, "%s: %u reply is not text", url, status);
	if (metrics && status == 200) {
		CHECK(strncmp(reply, "# HELP ", 7) == 0, "%s: 200 not in the text format: %.80s",
		      url, reply);
		return 1;
	}
	json_error_t jerr;
	json_t *root = json_loadb(reply, rlen, 0, &jerr);
	CHECK(json_is_object(root), "%s: %u reply is not a JSON object: %s", url, status, reply);
	if (status == 405)
		CHECK(json_object_get(root, "detail"), "%s: 405 without detail: %s", url, reply);
	else
		CHECK(!metrics &&
		              (status == 200 || (status == 503 && strcmp(url, "/ready") == 0)) &&
		              json_is_string(json_object_get(root, "status")),
		      "%s answered %u: %s", url, status, reply);
	json_decref(root);
	return 1;
}

static void check_reply(const char *url, const char *body, size_t blen, unsigned status,
                        const char *reply, size_t rlen)
{
	const char *route = strrchr(url, '/');
	json_t *root, *v;

	if (check_ops_reply(url, status, reply, rlen))
		return;

	CHECK(status == 200 || status == 204 || (status >= 400 && status < 500),
	      "%s answered %u: %.*s", url, status, (int)rlen, reply ? reply : "");
	if (status == 204) {
		CHECK(!reply && rlen == 0, "%s: 204 with a body", url);
		return;
	}
	CHECK(reply && strlen(reply) == rlen, "%s: %u reply is not text", url, status);
	/* A 422 echoes the offending value as sent, and a JSON number may
	 * have more digits than jansson's integers: read numbers as reals, and
	 * take one beyond even a double (jansson's only refusal of valid
	 * JSON) as well-formed. */
	json_error_t jerr;
	root = json_loadb(reply, rlen, JSON_DECODE_INT_AS_REAL, &jerr);
	if (!root && status == 422 && strstr(jerr.text, "overflow"))
		return;
	CHECK(json_is_object(root), "%s: %u reply is not a JSON object: %s", url, status, reply);
	if (status != 200) {
		CHECK(json_object_get(root, "detail"), "%s: %u without detail: %s", url, status,
		      reply);
		json_decref(root);
		return;
	}
	route = route ? route + 1 : "";
	if (strcmp(route, "exists") == 0)
		v = json_object_get(root, "exists");
	else
		v = json_object_get(root, "indices");
	CHECK(json_is_array(v), "%s: 200 without its list: %s", url, reply);
	CHECK((long)json_array_size(v) == request_keys(body, blen, "keys"),
	      "%s: %zu answers for %ld keys", url, json_array_size(v),
	      request_keys(body, blen, "keys"));
	json_decref(root);
}

static void one_request(const char *req, size_t len)
{
	const char *nl = memchr(req, '\n', len), *method = "POST";
	size_t ulen = nl ? (size_t)(nl - req) : len;
	const char *body = nl ? nl + 1 : NULL;
	size_t blen = nl ? len - ulen - 1 : 0;
	char url[512], *reply = NULL;
	unsigned status = 0;
	size_t rlen = 0;

	if (ulen >= sizeof(url))
		ulen = sizeof(url) - 1;
	memcpy(url, req, ulen);
	url[ulen] = '\0';
	if (strncmp(url, "GET ", 4) == 0) {
		method = "GET";
		memmove(url, url + 4, ulen - 3);
	}
	if (serve_request(fi.m, url, method, body, blen, &status, &reply, &rlen) < 0)
		return; /* out of memory: nothing to check */
	check_reply(url, body, blen, status, reply, rlen);
	const char *last = strrchr(url, '/');
	int confirm = last && strcmp(last, "/confirm_write") == 0;
	if (body && last && (confirm || strcmp(last, "/reserve_and_allocate_page_indices") == 0)) {
		char why[256];
		int taken;
		CHECK(flat_write_check(body, blen, confirm, SERVE_MAX_KEYS, &taken, why,
		                       sizeof(why)) == 0,
		      "%s: %s", url, why);
	}
	/* the scan reads every body as the copy does, whatever the route */
	if (body) {
		static const enum fsc_kind kinds[] = {FSC_KEYS, FSC_RESERVE, FSC_CONFIRM};
		char why[256];
		int taken;
		for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
			CHECK(flat_scan_check(body, blen, kinds[k], SERVE_MAX_KEYS, &taken, why,
			                      sizeof(why)) == 0,
			      "%s, as body kind %d: %s", url, (int)kinds[k], why);
	}
	/* exists and get_page_indices change nothing their replies show: the
	 * general parse must answer them as the fast path did. The evictor
	 * thread may change the pool between the two (a reservation expired,
	 * a page evicted): then the fast path, asked once more after the
	 * general parse, answers as it did. */
	const char *route = strrchr(url, '/');
	if (route && (strcmp(route, "/exists") == 0 || strcmp(route, "/get_page_indices") == 0)) {
		unsigned slow_status = 0, again_status = 0;
		char *slow = NULL, *again = NULL;
		size_t slow_len = 0, again_len = 0;
		serve_set_fast_path(0);
		int rc = serve_request(fi.m, url, method, body, blen, &slow_status, &slow,
		                       &slow_len);
		serve_set_fast_path(1);
		int same = rc < 0 || (slow_status == status && slow_len == rlen &&
		                      (!rlen || memcmp(slow, reply, rlen) == 0));
		if (!same && serve_request(fi.m, url, method, body, blen, &again_status, &again,
		                           &again_len) == 0)
			same = again_status == slow_status && again_len == slow_len &&
			       (!slow_len || memcmp(again, slow, slow_len) == 0);
		CHECK(same, "%s: fast path %u %.*s, general parse %u %.*s, fast path again %u %.*s",
		      url, status, (int)rlen, reply ? reply : "", slow_status, (int)slow_len,
		      slow ? slow : "", again_status, (int)again_len, again ? again : "");
		free(slow);
		free(again);
	}
	free(reply);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const char *p = (const char *)data, *end = p + size;

	if (!fi.m || ++inputs % RESET_EVERY == 0)
		setup();
	while (p < end) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));
		size_t n = nul ? (size_t)(nul - p) : (size_t)(end - p);

		one_request(p, n);
		p += n + 1;
	}
	return 0;
}
