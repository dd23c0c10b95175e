/*
 * sqlite_gather.h - an SQLite VFS that gathers a transaction's writes to
 * the WAL into one write(2) (sqlite_gather.c).
 */
#ifndef PAGEFS_META_STORE_SQLITE_GATHER_H
#define PAGEFS_META_STORE_SQLITE_GATHER_H

#include <sqlite3.h>
#include <stdint.h>

/* The name of the gathering VFS, registered at the first call (not as
 * the default), or NULL when it cannot be (SQLite's default is then
 * used: the same files, a write(2) a frame header and a page). */
const char *store_gather_vfs(void);

/* Writes what db's WAL holds gathered, if anything: 0 or an SQLite error
 * code. After a COMMIT it finds nothing (the commit frame's write ends
 * the gathering); the store asks anyway, so that a commit never reports
 * success with its frames outside the kernel. */
int store_gather_flush(sqlite3 *db);

/* write(2)s of gathered WAL bytes so far, in this process (tests). */
uint64_t store_gather_writes(void);

#endif
