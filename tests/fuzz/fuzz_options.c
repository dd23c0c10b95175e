/*
 * fuzz_options.c - libFuzzer target for the command line of
 * `pagefs mount` (cli_mount_parse in tools/cli_mount.c: sizes, --evict,
 * --verify, --durability, -o, --threads, --log-level, --entry-timeout,
 * --http, --prefix, the --meta URI, BACKING and MOUNTPOINT) and for the
 * parsers it relies on (serve_parse_listen, cli_parse_long, the index
 * URI that meta_open reads).
 *
 * Input: the arguments after "mount", separated by NUL bytes. An
 * argument starting with '@' names a path in the target's temporary
 * directory ("@b": "DIR/b"), which holds "b/" (a backing directory),
 * "m/" (an empty mount point) and "f" (a file), so seeds name real
 * things (the fuzzer's working directory stays: its corpus is there). The parser prints usage errors to stderr: run with
 * -close_fd_mask=3 (CHECK reports still reach the fuzzer's log).
 *
 * Checks: the parser answers 0, -1 (help), CLI_USAGE or CLI_FAIL; a
 * configuration it accepts holds only values the daemon can serve with.
 */
#define FUZZ_NAME "fuzz_options"
#include "tests/fuzz/fuzz_index.h"

#include "meta/cluster.h"
#include "meta/index.h"
#include "meta/ops.h"
#include "meta/record.h"
#include "meta/store.h"
#include "serve/serve.h"
#include "tools/cli_common.h"
#include "tools/cli_mount.h"

#include <arpa/inet.h>
#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define MAX_ARGS 64

static char dir[64];

static void remove_dir(void)
{
	char cmd[100];

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (system(cmd) != 0)
		fprintf(stderr, "fuzz_options: could not remove %s\n", dir);
}

static void setup(void)
{
	char state[100], path[100];
	FILE *f;

	snprintf(dir, sizeof(dir), "/tmp/fuzz_options.XXXXXX");
	CHECK(mkdtemp(dir) != NULL, "mkdtemp");
	atexit(remove_dir);
	snprintf(path, sizeof(path), "%s/b", dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
	snprintf(path, sizeof(path), "%s/m", dir);
	CHECK(mkdir(path, 0755) == 0, "mkdir %s", path);
	snprintf(path, sizeof(path), "%s/f", dir);
	CHECK((f = fopen(path, "w")) && fclose(f) == 0, "creating %s", path);
	/* The default --meta makes a directory under the state home. */
	snprintf(state, sizeof(state), "%s/state", dir);
	setenv("XDG_STATE_HOME", state, 1);
}

static int is_pow2(uint64_t v)
{
	return v && !(v & (v - 1));
}

static void check_config(const struct cli_mount_config *c)
{
	char addr[64], err[256];
	struct store_uri u;
	struct stat st;
	int port;

	CHECK(is_pow2(c->page_size) && c->page_size >= 4096, "page size %llu",
	      (unsigned long long)c->page_size);
	CHECK(is_pow2(c->capacity) && c->capacity >= c->page_size &&
	              c->capacity % c->page_size == 0,
	      "capacity %llu for pages of %llu", (unsigned long long)c->capacity,
	      (unsigned long long)c->page_size);
	CHECK(c->prefix && meta_check_prefix(c->prefix) == 0, "prefix '%s'", c->prefix);
	CHECK(c->evict == META_EVICT_LRU || c->evict == META_EVICT_NONE, "evict %d", c->evict);
	CHECK(c->verify >= META_VERIFY_NONE && c->verify <= META_VERIFY_ALWAYS, "verify %d",
	      c->verify);
	CHECK(c->durability == META_DURABLE_PROCESS || c->durability == META_DURABLE_POWER,
	      "durability %d", c->durability);
	CHECK(c->threads >= 0 && c->threads <= 1024, "threads %d", c->threads);
	CHECK(c->log_level >= LOG_ERROR && c->log_level <= LOG_DEBUG, "log level %d", c->log_level);
	CHECK(isfinite(c->entry_timeout) && c->entry_timeout >= 0 && c->entry_timeout <= 1e9,
	      "entry timeout %g", c->entry_timeout);
	CHECK(!c->debug || c->foreground, "--debug without -f");
	CHECK(c->backing[0] == '/' && stat(c->backing, &st) == 0 && S_ISDIR(st.st_mode),
	      "BACKING '%s'", c->backing);
	CHECK(c->mountpoint[0] == '/' && stat(c->mountpoint, &st) == 0 && S_ISDIR(st.st_mode),
	      "MOUNTPOINT '%s'", c->mountpoint);
	CHECK(!c->log_file[0] || c->log_file[0] == '/', "log file '%s'", c->log_file);
	CHECK(!c->http || serve_parse_listen(c->http, addr, sizeof(addr), &port) == 0,
	      "--http '%s'", c->http);
	/* The index URI the daemon will open: an absolute sqlite path, a
	 * PostgreSQL URI handed to libpq as given, or a scheme the store
	 * refuses with a message. */
	if (strncmp(c->meta_uri, "sqlite:", 7) == 0) {
		CHECK(c->meta_uri[7] == '/', "meta URI '%s' is not absolute", c->meta_uri);
		CHECK(store_parse_uri(c->meta_uri, &u, err, sizeof(err)) == 0 &&
		              u.engine == STORE_SQLITE && strcmp(u.target, c->meta_uri + 7) == 0,
		      "meta URI '%s'", c->meta_uri);
	} else {
		CHECK(strstr(c->meta_uri, "://"), "meta URI '%s'", c->meta_uri);
		int rc = store_parse_uri(c->meta_uri, &u, err, sizeof(err));
		CHECK(rc == 0 ? u.engine == STORE_PG && strcmp(u.target, c->meta_uri) == 0
		              : err[0] != '\0',
		      "meta URI '%s': %d %s", c->meta_uri, rc, err);
	}
}

/* The pure parsers, on one argument. */
static void check_token(const char *s)
{
	char addr[64];
	int port = -1;
	long l;

	if (serve_parse_listen(s, addr, sizeof(addr), &port) == 0) {
		struct in_addr ia;

		CHECK(port >= 0 && port <= 65535, "port %d from '%s'", port, s);
		CHECK(inet_pton(AF_INET, addr, &ia) == 1, "address '%s' from '%s'", addr, s);
	}
	if (cli_parse_long(s, 1, 1024, &l) == 0)
		CHECK(l >= 1 && l <= 1024, "'%s' -> %ld outside [1, 1024]", s, l);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct cli_mount_config cfg;
	char *buf = malloc(size + 1), *argv[MAX_ARGS + 2], *paths[MAX_ARGS + 2] = {0};
	int argc = 0, ret;

	if (!buf)
		return 0;
	if (!dir[0])
		setup();
	memcpy(buf, data, size);
	buf[size] = '\0';
	argv[argc++] = "mount";
	for (size_t i = 0; i <= size && argc <= MAX_ARGS;) {
		char *arg = buf + i;

		i += strlen(arg) + 1;
		check_token(arg);
		if (arg[0] == '@' && asprintf(&paths[argc], "%s/%s", dir, arg + 1) > 0)
			arg = paths[argc];
		argv[argc++] = arg;
	}
	argv[argc] = NULL;
	optind = 0; /* glibc: start over, reinitialized */
	ret = cli_mount_parse(argc, argv, &cfg);
	CHECK(ret == 0 || ret == -1 || ret == CLI_USAGE || ret == CLI_FAIL, "parse = %d", ret);
	if (ret == 0)
		check_config(&cfg);
	for (int i = 0; i < argc; i++)
		free(paths[i]);
	free(buf);
	return 0;
}
