/*
 * log.h - one logging function with levels and a sink, for every layer.
 *
 * Messages go to stderr until log_open_file() names a file. Debug messages
 * are dropped unless the level is LOG_DEBUG. Thread safe.
 */
#ifndef PAGEFS_LOG_H
#define PAGEFS_LOG_H

enum log_level { LOG_ERROR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

/* Parses "error", "warn", "info", "debug". Returns the level or -1. */
int log_parse_level(const char *s);
void log_set_level(enum log_level level);
/* Appends to path from now on. 0 or -errno. */
int log_open_file(const char *path);
void log_msg(enum log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define log_error(...) log_msg(LOG_ERROR, __VA_ARGS__)
#define log_warn(...) log_msg(LOG_WARN, __VA_ARGS__)
#define log_info(...) log_msg(LOG_INFO, __VA_ARGS__)
#define log_debug(...) log_msg(LOG_DEBUG, __VA_ARGS__)

#endif
