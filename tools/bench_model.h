/*
 * bench_model.h - what `pagefs bench --backing-model 3fs` and its FUSE
 * stand-in (pagefs-backing-model, tools/bench_backing_model.c) share: the
 * requests the stand-in counts, and the counter file through which the
 * bench reads them.
 *
 * The counter file is MODEL_OP_COUNT uint64_t, one per request kind,
 * which the stand-in maps shared and increments atomically as requests
 * arrive; the bench maps the same file and takes differences around each
 * measurement (requests per page, per contender).
 */
#ifndef PAGEFS_BENCH_MODEL_H
#define PAGEFS_BENCH_MODEL_H

/* Request kinds; the ones marked meta or data wait that latency. */
enum model_op {
	MODEL_LOOKUP,  /* meta */
	MODEL_CREATE,  /* meta */
	MODEL_MKDIR,   /* meta */
	MODEL_OPEN,    /* meta */
	MODEL_RENAME,  /* meta */
	MODEL_UNLINK,  /* meta */
	MODEL_RMDIR,   /* meta */
	MODEL_SETATTR, /* meta */
	MODEL_READDIR, /* meta */
	MODEL_READ,    /* data */
	MODEL_WRITE,   /* data */
	MODEL_GETATTR,
	MODEL_FLUSH,
	MODEL_RELEASE,
	MODEL_FSYNC,
	MODEL_OPENDIR,
	MODEL_RELEASEDIR,
	MODEL_FORGET,
	MODEL_OTHER, /* statfs, fallocate */
	MODEL_OP_COUNT
};

#define MODEL_OP_NAMES                                                                             \
	{                                                                                          \
		"lookup", "create", "mkdir", "open", "rename", "unlink", "rmdir", "setattr",       \
			"readdir", "read", "write", "getattr", "flush", "release", "fsync",        \
			"opendir", "releasedir", "forget", "other"                                 \
	}

/* 1 if requests of kind op wait the metadata latency, 2 the data one. */
#define MODEL_OP_WAITS(op) ((op) <= MODEL_READDIR ? 1 : (op) <= MODEL_WRITE ? 2 : 0)

/* The stand-in's file name, beside the pagefs binary. */
#define MODEL_BIN "pagefs-backing-model"

#endif
