/*
 * cli_serve.c - `pagefs serve-meta`: the mini_3fs_metadata_server HTTP
 * protocol from the index, without FUSE, in the foreground until SIGINT
 * or SIGTERM. (`pagefs mount --http` serves the same from a mount.)
 */
#include "meta/log.h"
#include "serve/serve.h"
#include "tools/cli_common.h"
#include "tools/cli_index.h"

#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <systemd/sd-daemon.h>

#define CMD "serve-meta"

enum {
	OPT_LISTEN = 400,
	OPT_THREADS,
	OPT_RESERVE_TIMEOUT,
	OPT_HEADROOM,
	OPT_LOG_LEVEL,
	OPT_LOG_FILE,
};

static void serve_usage(FILE *f)
{
	fprintf(f,
	        "usage: pagefs serve-meta --backing DIR [--meta URI] [--listen ADDR:PORT]\n"
	        "                         [--page-size SIZE] [--prefix NAME] [--threads N]\n"
	        "                         [--reserve-timeout SEC] [--headroom PCT]\n"
	        "                         [--log-level LEVEL] [--log-file PATH|syslog] [--help]\n"
	        "Serves SGLang's mini_3fs_metadata_server protocol (HiCacheHF3FS) from the\n"
	        "index. --listen defaults to 127.0.0.1:%d (port 0: any free port; the\n"
	        "address is printed). Unconfirmed reservations return after\n"
	        "--reserve-timeout (60); the evictor keeps --headroom %% of each pool\n"
	        "free (2). GET /metrics, /health and /ready answer on the same listener.\n"
	        "The log goes to stderr, or to --log-file PATH (reopened on SIGHUP, for\n"
	        "logrotate) or syslog. Runs until SIGINT or SIGTERM.\n",
	        SERVE_DEFAULT_PORT);
}

int cli_serve_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"meta", required_argument, NULL, CLI_INDEX_META},
		{"backing", required_argument, NULL, CLI_INDEX_BACKING},
		{"prefix", required_argument, NULL, CLI_INDEX_PREFIX},
		{"page-size", required_argument, NULL, CLI_INDEX_PAGE_SIZE},
		{"listen", required_argument, NULL, OPT_LISTEN},
		{"threads", required_argument, NULL, OPT_THREADS},
		{"reserve-timeout", required_argument, NULL, OPT_RESERVE_TIMEOUT},
		{"headroom", required_argument, NULL, OPT_HEADROOM},
		{"log-level", required_argument, NULL, OPT_LOG_LEVEL},
		{"log-file", required_argument, NULL, OPT_LOG_FILE},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct cli_index_opts io = {0};
	struct meta_keys_tuning tune = {0};
	const char *listen = "127.0.0.1", *log_file = NULL;
	char addr[64], err[1024];
	long threads = 0, v; /* 0: cli_http_workers */
	int c, r, port, bound, sig, log_level = LOG_INFO;
	struct serve *sv;
	struct meta *m;
	sigset_t set;

	while ((c = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
		if ((r = cli_index_opt(CMD, &io, c, optarg)) == 1)
			continue;
		if (r)
			return r;
		switch (c) {
		case 'h':
			serve_usage(stdout);
			return CLI_OK;
		case OPT_LISTEN:
			listen = optarg;
			break;
		case OPT_THREADS:
			if (cli_parse_long(optarg, 1, 64, &threads) < 0)
				return cli_usage_error(CMD, "--threads must be 1..64");
			break;
		case OPT_RESERVE_TIMEOUT:
			if (cli_parse_long(optarg, 1, 86400, &v) < 0)
				return cli_usage_error(CMD, "--reserve-timeout must be 1..86400 s");
			tune.reserve_timeout_ns = v * 1000000000LL;
			break;
		case OPT_HEADROOM:
			if (cli_parse_long(optarg, 1, 50, &v) < 0)
				return cli_usage_error(CMD, "--headroom must be 1..50 (%%)");
			tune.headroom_pct = (uint32_t)v;
			break;
		case OPT_LOG_LEVEL:
			if ((log_level = log_parse_level(optarg)) < 0)
				return cli_usage_error(CMD,
				                       "--log-level: error, warn, info or debug");
			break;
		case OPT_LOG_FILE:
			log_file = optarg;
			break;
		default:
			return cli_usage_error(CMD, "unknown option or missing argument '%s'",
			                       argv[optind - 1]);
		}
	}
	if (optind != argc)
		return cli_usage_error(CMD, "unexpected argument '%s'", argv[optind]);
	if (serve_parse_listen(listen, addr, sizeof(addr), &port) < 0)
		return cli_usage_error(CMD, "--listen '%s' is not IPV4ADDR:PORT", listen);
	/* Signals are taken by sigwait below, never by a server thread. */
	sigemptyset(&set);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGHUP);
	pthread_sigmask(SIG_BLOCK, &set, NULL);
	log_set_level((enum log_level)log_level);
	if (log_file && (r = log_open_file(log_file)) < 0)
		return cli_fail(CMD,
		                "cannot open --log-file '%s': %s; name a file in an existing, "
		                "writable directory (or syslog)",
		                log_file, strerror(-r));
	if ((r = cli_index_open(CMD, &io, &m)) != CLI_OK)
		return r;
	log_set_level((enum log_level)log_level); /* (cli_index_open set warn) */
	meta_keys_tune(m, &tune);
	if (!threads)
		threads = cli_http_workers(io.uri);
	if (serve_start(m, addr, port, (int)threads, &sv, &bound, err, sizeof(err)) < 0) {
		meta_close(m);
		return cli_fail(CMD, "%s", err);
	}
	char meta_name[sizeof(io.uri)];
	meta_uri_display(io.uri, meta_name, sizeof(meta_name));
	printf("pagefs serve-meta: listening on http://%s:%d (index %s)\n", addr, bound, meta_name);
	fflush(stdout);
	log_info("serve-meta listening on http://%s:%d (index %s)", addr, bound, meta_name);
	sd_notifyf(0, "READY=1\nSTATUS=serving http://%s:%d", addr, bound);
	while (sigwait(&set, &sig) == 0 && sig == SIGHUP)
		if ((r = log_reopen()) < 0)
			log_error("SIGHUP: cannot reopen the log file: %s", strerror(-r));
	log_info("serve-meta stopping (signal %d)", sig);
	sd_notify(0, "STOPPING=1");
	serve_stop(sv);
	meta_close(m);
	return CLI_OK;
}
