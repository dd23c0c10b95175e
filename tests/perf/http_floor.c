/*
 * http_floor.c - the floor of the 3FS metadata protocol over HTTP here: a
 * libmicrohttpd server set up as pagefs serve-meta's (an internal polling
 * thread per worker, epoll, THREADS workers: 1 by default, as serve-meta
 * on an SQLite index) that reads every request body and
 * answers with canned bytes of the shape serve-meta answers, without
 * parsing a request or keeping a key.
 *
 *   http_floor [PORT] [THREADS]
 *
 * Prints "listening on 127.0.0.1:PORT" and serves until SIGINT or SIGTERM.
 * tests/perf/http_load measures it as it measures serve-meta and SGLang's
 * Python server: keys per server CPU second here is the most any server on
 * libmicrohttpd could reach with these requests on this machine
 * (docs/BENCHMARKS.md, "Where a request's server CPU goes").
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define BATCH 128

static char reserve_answer[BATCH * 24 + 8]; /* [[false,SLOT],...] */
static char exists_answer[BATCH * 6 + 8];   /* [true,...] */
static char get_answer[BATCH * 12 + 8];     /* [SLOT,...] */

static void make_answers(void)
{
	size_t r = 0, e = 0, g = 0;

	r += (size_t)sprintf(reserve_answer, "[");
	e += (size_t)sprintf(exists_answer, "[");
	g += (size_t)sprintf(get_answer, "[");
	for (int i = 0; i < BATCH; i++) {
		const char *sep = i ? "," : "";
		r += (size_t)sprintf(reserve_answer + r, "%s[false,%d]", sep, 4000000 + i);
		e += (size_t)sprintf(exists_answer + e, "%strue", sep);
		g += (size_t)sprintf(get_answer + g, "%s%d", sep, 4000000 + i);
	}
	sprintf(reserve_answer + r, "]");
	sprintf(exists_answer + e, "]");
	sprintf(get_answer + g, "]");
}

/* The canned answer to url: its status and body ("" for 204). */
static int answer_of(const char *url, const char **body)
{
	const char *last = strrchr(url, '/');

	last = last ? last + 1 : url;
	*body = "";
	if (strcmp(last, "reserve_and_allocate_page_indices") == 0)
		*body = reserve_answer;
	else if (strcmp(last, "exists") == 0 || strcmp(last, "batch_exists") == 0)
		*body = exists_answer;
	else if (strcmp(last, "get_page_indices") == 0)
		*body = get_answer;
	else if (strcmp(last, "confirm_write") == 0)
		return MHD_HTTP_NO_CONTENT;
	else if (strcmp(last, "initialize") != 0)
		return MHD_HTTP_NOT_FOUND;
	return MHD_HTTP_OK;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                  const char *method, const char *version, const char *upload,
                                  size_t *upload_size, void **con_cls)
{
	static int started;
	const char *body;

	(void)cls;
	(void)method;
	(void)version;
	(void)upload;
	if (!*con_cls) { /* the headers: the body comes in the next calls */
		*con_cls = &started;
		return MHD_YES;
	}
	if (*upload_size) { /* a piece of the body: read, dropped */
		*upload_size = 0;
		return MHD_YES;
	}
	*con_cls = NULL;
	int status = answer_of(url, &body);
	struct MHD_Response *resp =
		MHD_create_response_from_buffer(strlen(body), (void *)body, MHD_RESPMEM_PERSISTENT);
	if (!resp)
		return MHD_NO;
	if (status != MHD_HTTP_NO_CONTENT)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	enum MHD_Result ret = MHD_queue_response(conn, (unsigned)status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void on_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
	(void)cls;
	(void)conn;
	(void)toe;
	*con_cls = NULL;
}

int main(int argc, char **argv)
{
	int port = argc > 1 ? atoi(argv[1]) : 0, threads = argc > 2 ? atoi(argv[2]) : 1;
	sigset_t set;
	int sig;

	if (argc > 3 || port < 0 || port > 65535 || threads < 1 || threads > 64) {
		fprintf(stderr, "usage: http_floor [PORT] [THREADS]\n");
		return 2;
	}
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	make_answers();
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* the workers inherit it */
	struct MHD_Daemon *d = MHD_start_daemon(
		MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, (uint16_t)port, NULL, NULL,
		on_request, NULL, MHD_OPTION_THREAD_POOL_SIZE, (unsigned)threads,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL, MHD_OPTION_CONNECTION_LIMIT, 1024u,
		MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
	if (!d) {
		fprintf(stderr, "http_floor: cannot listen on port %d\n", port);
		return 1;
	}
	const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
	printf("listening on 127.0.0.1:%u\n", di ? di->port : (unsigned)port);
	fflush(stdout);
	sigwait(&set, &sig);
	MHD_stop_daemon(d);
	return 0;
}
