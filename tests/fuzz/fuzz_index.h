/*
 * fuzz_index.h - what the fuzz targets that need a real index share: a
 * CHECK that reports on the fuzzer's stderr even when the target's own
 * stderr is discarded (-close_fd_mask=2, for code that prints usage
 * errors), and a throwaway index in a temporary directory, removed at
 * exit. Header-only: each target is one .c file.
 */
#ifndef PAGEFS_FUZZ_INDEX_H
#define PAGEFS_FUZZ_INDEX_H

#include "meta/log.h"
#include "meta/meta.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerInitialize(int *argc, char ***argv);

/* A copy of stderr made before libFuzzer's -close_fd_mask replaces it. */
static FILE *fuzz_report;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			FILE *out_ = fuzz_report ? fuzz_report : stderr;                           \
			fprintf(out_, "%s: ", FUZZ_NAME);                                          \
			fprintf(out_, __VA_ARGS__);                                                \
			fprintf(out_, " [%s]\n", #cond);                                           \
			fflush(out_);                                                              \
			abort();                                                                   \
		}                                                                                  \
	} while (0)

/* Called by libFuzzer before it parses its flags (and closes stderr). */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	int fd = dup(STDERR_FILENO);

	(void)argc;
	(void)argv;
	fuzz_report = fd >= 0 ? fdopen(fd, "w") : NULL;
	return 0;
}

/* The throwaway index: DIR/index.db over DIR/backing. */
struct fuzz_index {
	char dir[64], backing[128], uri[160];
	struct meta *m;
};

static struct fuzz_index *fuzz_index_current;

static inline void fuzz_index_remove(void)
{
	struct fuzz_index *fi = fuzz_index_current;
	char cmd[200];

	if (!fi)
		return;
	meta_close(fi->m);
	fi->m = NULL;
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", fi->dir);
	if (fi->dir[0] && system(cmd) != 0)
		fprintf(stderr, "%s: could not remove %s\n", FUZZ_NAME, fi->dir);
}

/* Opens a fresh, empty index (closing and deleting the previous one) with
 * slots of 4096 bytes and 16 slots per pool by default. */
static inline void fuzz_index_open(struct fuzz_index *fi)
{
	struct meta_config cfg = {0};
	char err[512], cmd[400];

	if (!fuzz_index_current) {
		snprintf(fi->dir, sizeof(fi->dir), "/tmp/%s.XXXXXX", FUZZ_NAME);
		CHECK(mkdtemp(fi->dir) != NULL, "mkdtemp");
		snprintf(fi->backing, sizeof(fi->backing), "%s/backing", fi->dir);
		snprintf(fi->uri, sizeof(fi->uri), "sqlite:%s/index.db", fi->dir);
		fuzz_index_current = fi;
		atexit(fuzz_index_remove);
		log_set_level(LOG_ERROR);
	}
	meta_close(fi->m);
	fi->m = NULL;
	/* A fresh index needs a fresh backing dir (.pagefs-owner names the old). */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'/index.db* '%s' && mkdir '%s'", fi->dir, fi->backing,
	         fi->backing);
	CHECK(system(cmd) == 0, "%s", cmd);
	cfg.uri = fi->uri;
	cfg.backing = fi->backing;
	cfg.prefix = "hicache";
	cfg.default_slot_size = 4096;
	cfg.default_capacity = 4096 * 16;
	cfg.evict = META_EVICT_LRU;
	cfg.verify = META_VERIFY_NONE;
	cfg.durability = META_DURABLE_PROCESS;
	CHECK(meta_open(&cfg, &fi->m, err, sizeof(err)) == 0, "meta_open: %s", err);
}

#endif
