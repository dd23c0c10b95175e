/*
 * log.h - one logging function with levels and a sink, for every layer.
 *
 * Messages go to stderr until log_open_file() names a file (or "syslog").
 * Every line carries the time (UTC), the process, the level and the
 * subsystem - the source file it came from, e.g. "meta/journal":
 *
 *   2026-01-02T03:04:05.678Z pagefs[123] warn meta/journal: index write failed ...
 *
 * Debug messages are dropped unless the level is LOG_DEBUG. Thread safe.
 */
#ifndef PAGEFS_LOG_H
#define PAGEFS_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Parses "error", "warn", "info", "debug". Returns the level or -1. */
int log_parse_level(const char *s);
void log_set_level(enum log_level level);
/* Appends to path from now on; "syslog" sends every line to syslog(3)
 * (facility daemon, ident pagefs) instead. 0 or -errno. */
int log_open_file(const char *path);
/* Opens the log file's path again (after logrotate moved it): 0, or
 * -errno (the old file stays in use). Nothing to do for stderr/syslog. */
int log_reopen(void);
/* From now on SIGHUP reopens the log file (async-signal-safe: open and
 * dup2 onto the sink's descriptor) instead of its default action. */
void log_reopen_on_sighup(void);
/* file: the __FILE__ of the caller (its subsystem), or NULL. */
void log_msg_from(enum log_level level, const char *file, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
#define log_msg(level, ...) log_msg_from(level, __FILE__, __VA_ARGS__)

#define log_error(...) log_msg_from(LOG_ERROR, __FILE__, __VA_ARGS__)
#define log_warn(...) log_msg_from(LOG_WARN, __FILE__, __VA_ARGS__)
#define log_info(...) log_msg_from(LOG_INFO, __FILE__, __VA_ARGS__)
#define log_debug(...) log_msg_from(LOG_DEBUG, __FILE__, __VA_ARGS__)

#endif
