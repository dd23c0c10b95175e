/*
 * log.c - the log sink: stderr or an append-only file, one line per call,
 * prefixed with a UTC timestamp and the level.
 */
#include "meta/log.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static enum log_level log_level_now = LOG_INFO; /* protected by log_lock */
static FILE *log_sink;                          /* protected by log_lock; NULL: stderr */

static const char *const level_names[] = {"error", "warn", "info", "debug"};

int log_parse_level(const char *s)
{
	for (int i = 0; i < 4; i++)
		if (strcmp(s, level_names[i]) == 0)
			return i;
	return -1;
}

void log_set_level(enum log_level level)
{
	pthread_mutex_lock(&log_lock);
	log_level_now = level;
	pthread_mutex_unlock(&log_lock);
}

int log_open_file(const char *path)
{
	FILE *f = fopen(path, "ae");
	if (!f)
		return -errno;
	setvbuf(f, NULL, _IOLBF, 0);
	pthread_mutex_lock(&log_lock);
	if (log_sink)
		fclose(log_sink);
	log_sink = f;
	pthread_mutex_unlock(&log_lock);
	return 0;
}

void log_msg(enum log_level level, const char *fmt, ...)
{
	char when[32];
	struct timespec ts;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);

	pthread_mutex_lock(&log_lock);
	if (level <= log_level_now) {
		FILE *out = log_sink ? log_sink : stderr;
		fprintf(out, "%s.%03ldZ pagefs %s: ", when, ts.tv_nsec / 1000000,
		        level_names[level]);
		va_start(ap, fmt);
		vfprintf(out, fmt, ap);
		va_end(ap);
		fputc('\n', out);
	}
	pthread_mutex_unlock(&log_lock);
}
