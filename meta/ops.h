/*
 * ops.h - the page and pool operations, as the layers above them need them.
 *
 * meta/ops/ implements the meta_page_* and meta_pool_* calls of meta.h that
 * fs/ and serve/ use; this header is what the cluster and key layers call
 * of it besides.
 */
#ifndef PAGEFS_META_OPS_H
#define PAGEFS_META_OPS_H

#include "meta/index.h"

/* pool.c helpers */
/* meta_pool_remove; keep_file: leave the data file where it is (an
 * import that adopted an existing file and is undone). */
int ops_pool_remove(struct meta *m, uint32_t pool_id, int keep_file);
void ops_pool_retire(struct meta *m, struct pool *p, struct dropped **drops);
/* Frees a removed pool when no reservation, pending page or pin of this
 * node uses its data file any more. 1 if it was freed. */
int ops_pool_reap(struct meta *m, struct pool *p);
/* index_lru_touch plus atime, persisted at most once a second per page. */
void ops_page_touch(struct meta *m, struct page *p);

#endif
