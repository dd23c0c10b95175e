/*
 * http_load.c - load generator for the mini_3fs_metadata_server protocol
 * (pagefs serve-meta, pagefs mount --http, or SGLang's Python server).
 *
 *   http_load PORT OP CLIENTS SECONDS [SERVER_PID]
 *
 * OP is exists, get (get_page_indices) or write (reserve_and_allocate +
 * confirm_write). Each client is one thread with one keep-alive
 * connection to 127.0.0.1:PORT sending batches of 128 keys of SGLang's
 * shape (64 hex digits + a model suffix). exists/get ask for keys that
 * client 0 of write run 0 stored (run write first; HTTP_LOAD_RUN below). Prints keys/s and, with
 * SERVER_PID, the server's CPU seconds (utime + stime from /proc) and keys
 * per CPU second. A minimal HTTP/1.1 client: it only needs
 * Content-Length replies, which both servers send.
 *
 * A write confirms only the keys its reserve gave a slot to and did not
 * find written, as SGLang's client does; `written` counts them (fewer
 * than `keys` when a full pool answers -1) and, with SERVER_PID, how much
 * the server's resident memory grew per key written.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* strcasestr */
#endif
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "perf_common.h"

static int BATCH = 128; /* keys per request; HTTP_LOAD_BATCH overrides */
#define STORED 65536    /* keys of client 0 of write run 0 that exists/get ask for */

static int port, op_write, op_get, seconds;
/* HTTP_LOAD_RUN: a write run of its own number writes keys no other run
 * wrote (client c, run r: indexes from r << 32), so every run measures
 * new keys; exists/get ask for keys of run 0, client 0. */
static unsigned long run;
static atomic_ullong total_keys;
static atomic_ullong total_written; /* write: keys confirmed */
static atomic_int stop;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int connect_to(void)
{
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
	int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;

	inet_pton(AF_INET, "127.0.0.1", &sa.sin_addr);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		perror("connect");
		exit(1);
	}
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

/* POSTs body to /0/route; reads the reply body into resp. Returns status. */
static int post(int fd, const char *route, const char *body, size_t blen, char *resp, size_t rcap)
{
	char head[256], buf[1 << 16];
	int hl = snprintf(head, sizeof(head),
	                  "POST /0/%s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: "
	                  "application/json\r\nContent-Length: %zu\r\n\r\n",
	                  route, blen);
	/* One send for head and body, as Python's http.client does for a bytes
	 * body: two sends would cost the server a second wakeup per request. */
	struct iovec iov[2] = {{head, (size_t)hl}, {(void *)body, blen}};
	if (writev(fd, iov, 2) != (ssize_t)((size_t)hl + blen))
		return -1;
	size_t got = 0;
	char *end = NULL;
	while (!end) {
		ssize_t n = read(fd, buf + got, sizeof(buf) - 1 - got);
		if (n <= 0)
			return -1;
		got += (size_t)n;
		buf[got] = '\0';
		end = strstr(buf, "\r\n\r\n");
	}
	int status = atoi(buf + 9);
	const char *cl = strcasestr(buf, "content-length:");
	size_t len = cl ? strtoul(cl + 15, NULL, 10) : 0, have = got - (size_t)(end + 4 - buf);
	if (len >= rcap)
		return -1;
	memcpy(resp, end + 4, have);
	while (have < len) {
		ssize_t n = read(fd, resp + have, len - have);
		if (n <= 0)
			return -1;
		have += (size_t)n;
	}
	resp[len] = '\0';
	return status;
}

/* Key i of a client (perf_sglang_key), quoted for JSON: hashed digits
 * (keys arrive in no order, as real ones do: an index keyed by name
 * sees random inserts, not appends). */
static size_t key(char *out, int client, unsigned long i)
{
	size_t n = perf_sglang_key(out + 1, 128, perf_mix(((uint64_t)client << 40) ^ i), 1);

	out[0] = out[n + 1] = '"';
	out[n + 2] = '\0';
	return n + 2;
}

static void *client_main(void *arg)
{
	int c = (int)(long)arg, fd = connect_to();
	char *body = malloc(1 << 20), *resp = malloc(1 << 20), *conf = malloc(1 << 20);
	unsigned long i = run << 32, seed = (unsigned long)c * 7919 + 1;

	while (!atomic_load(&stop)) {
		size_t n = 0;
		if (op_write) {
			n += (size_t)sprintf(body, "{\"keys\":[");
			for (int k = 0; k < BATCH; k++) {
				n += (size_t)sprintf(body + n, "%s[", k ? "," : "");
				n += key(body + n, c, i + (unsigned long)k);
				n += (size_t)sprintf(body + n, ",\"\"]");
			}
			n += (size_t)sprintf(body + n, "]}");
			if (post(fd, "reserve_and_allocate_page_indices", body, n, resp, 1 << 20) !=
			    200)
				break;
			/* [[false,N],...] -> written_keys_to_confirm, as SGLang's
			 * client: a key already written or refused (-1) is not */
			size_t m = (size_t)sprintf(conf, "{\"written_keys_to_confirm\":[");
			char *p = resp;
			int w = 0;
			for (int k = 0; k < BATCH; k++) {
				if (!(p = strchr(p + 1, '[')) || !(p = strchr(p, ',')))
					break; /* (a shorter answer: the rest got no slot) */
				int had = strncmp(p - 4, "true", 4) == 0;
				long slot = strtol(p + 1, NULL, 10);
				if (had || slot < 0)
					continue;
				m += (size_t)sprintf(conf + m, "%s[", w++ ? "," : "");
				m += key(conf + m, c, i + (unsigned long)k);
				m += (size_t)sprintf(conf + m, ",%ld]", slot);
			}
			atomic_fetch_add(&total_written, (unsigned long long)w);
			m += (size_t)sprintf(conf + m, "],\"pages_to_release\":[]}");
			if (post(fd, "confirm_write", conf, m, resp, 1 << 20) != 204)
				break;
			i += BATCH;
		} else {
			n += (size_t)sprintf(body, "{\"keys\":[");
			for (int k = 0; k < BATCH; k++) {
				seed = seed * 6364136223846793005UL + 1442695040888963407UL;
				n += (size_t)sprintf(body + n, "%s", k ? "," : "");
				n += key(body + n, 0, (seed >> 33) % STORED);
			}
			n += (size_t)sprintf(body + n, "]}");
			if (post(fd, op_get ? "get_page_indices" : "exists", body, n, resp,
			         1 << 20) != 200)
				break;
		}
		atomic_fetch_add(&total_keys, BATCH);
	}
	close(fd);
	free(body);
	free(resp);
	free(conf);
	return NULL;
}

static double cpu_s(int pid)
{
	char path[64], buf[4096];
	unsigned long ut = 0, st = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/stat", pid);
	if (pid <= 0 || !(f = fopen(path, "r")))
		return 0;
	if (fgets(buf, sizeof(buf), f)) {
		char *p = strrchr(buf, ')');
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
		                &st) != 2)
			ut = st = 0;
	}
	fclose(f);
	return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

/* The server's resident memory in bytes (VmRSS), 0 if unknown. */
static double rss_bytes(int pid)
{
	char path[64], line[256];
	double kib = 0;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", pid);
	if (pid <= 0 || !(f = fopen(path, "r")))
		return 0;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %lf", &kib) == 1)
			break;
	fclose(f);
	return kib * 1024;
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: http_load PORT exists|get|write CLIENTS SECONDS [PID]\n");
		return 2;
	}
	if (getenv("HTTP_LOAD_BATCH"))
		BATCH = atoi(getenv("HTTP_LOAD_BATCH"));
	if (getenv("HTTP_LOAD_RUN"))
		run = strtoul(getenv("HTTP_LOAD_RUN"), NULL, 10);
	port = atoi(argv[1]);
	op_write = strcmp(argv[2], "write") == 0;
	op_get = strcmp(argv[2], "get") == 0;
	int clients = atoi(argv[3]), pid = argc > 5 ? atoi(argv[5]) : 0;
	seconds = atoi(argv[4]);
	pthread_t th[256];
	double c0 = cpu_s(pid), m0 = rss_bytes(pid), t0 = now_s();
	for (int i = 0; i < clients && i < 256; i++)
		pthread_create(&th[i], NULL, client_main, (void *)(long)i);
	sleep((unsigned)seconds);
	atomic_store(&stop, 1);
	for (int i = 0; i < clients && i < 256; i++)
		pthread_join(th[i], NULL);
	double t = now_s() - t0, cpu = cpu_s(pid) - c0;
	unsigned long long k = atomic_load(&total_keys);
	printf("%s clients=%d keys=%llu keys/s=%.0f", argv[2], clients, k, (double)k / t);
	if (op_write) {
		unsigned long long w = atomic_load(&total_written);
		printf(" written=%llu", w);
		if (pid > 0 && w)
			printf(" rss_bytes/written=%.0f", (rss_bytes(pid) - m0) / (double)w);
	}
	if (pid > 0)
		printf(" server_cpu_s=%.2f keys/cpu_s=%.0f", cpu, cpu > 0 ? (double)k / cpu : 0);
	printf("\n");
	return 0;
}
