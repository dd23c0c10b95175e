/*
 * log.c - the log sink: stderr, an append-only file (reopened on SIGHUP
 * for logrotate), or syslog; one line per call with the time, level and
 * subsystem.
 */
#include "meta/log.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <syslog.h>
#include <time.h>
#include <unistd.h>

static pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;
static enum log_level log_level_now = LOG_INFO; /* protected by log_lock */
static FILE *log_sink;                          /* protected by log_lock; NULL: stderr */
static int log_syslog;                          /* protected by log_lock */
/* The file's path, set before the SIGHUP handler may read it, then fixed. */
static char log_path[PATH_MAX];

static const char *const level_names[] = {"error", "warn", "info", "debug"};
static const int syslog_levels[] = {LOG_ERR, LOG_WARNING, LOG_INFO, LOG_DEBUG};

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
	if (strcmp(path, "syslog") == 0) {
		openlog("pagefs", LOG_PID | LOG_NDELAY, LOG_DAEMON);
		pthread_mutex_lock(&log_lock);
		log_syslog = 1;
		pthread_mutex_unlock(&log_lock);
		return 0;
	}
	if (strlen(path) >= sizeof(log_path))
		return -ENAMETOOLONG;
	FILE *f = fopen(path, "ae");
	if (!f)
		return -errno;
	setvbuf(f, NULL, _IOLBF, 0);
	pthread_mutex_lock(&log_lock);
	if (log_sink)
		fclose(log_sink);
	log_sink = f;
	snprintf(log_path, sizeof(log_path), "%s", path);
	pthread_mutex_unlock(&log_lock);
	return 0;
}

/* Points fd at a fresh open of log_path. Async-signal-safe. */
static int reopen_onto(int fd)
{
	int nfd = open(log_path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0644);

	if (nfd < 0)
		return -errno;
	int rc = dup3(nfd, fd, O_CLOEXEC) < 0 ? -errno : 0;
	close(nfd);
	return rc;
}

int log_reopen(void)
{
	int rc = 0;

	pthread_mutex_lock(&log_lock);
	if (log_sink) {
		fflush(log_sink);
		rc = reopen_onto(fileno(log_sink));
	}
	pthread_mutex_unlock(&log_lock);
	return rc;
}

/* The sink's descriptor, for the signal handler (-1: no file). */
static volatile sig_atomic_t sink_fd = -1;

static void on_sighup(int sig)
{
	int saved = errno;

	(void)sig;
	if (sink_fd >= 0)
		reopen_onto(sink_fd); /* a failure keeps the old file */
	errno = saved;
}

void log_reopen_on_sighup(void)
{
	struct sigaction sa;

	pthread_mutex_lock(&log_lock);
	sink_fd = log_sink ? fileno(log_sink) : -1;
	pthread_mutex_unlock(&log_lock);
	memset(&sa, 0, sizeof(sa));
	sa.sa_handler = on_sighup;
	sigemptyset(&sa.sa_mask);
	sa.sa_flags = SA_RESTART;
	sigaction(SIGHUP, &sa, NULL);
}

/* The subsystem of a source file: its folder and name ("fs/fs_dir" of
 * ".../fs/fs_dir.c"); in meta/, "meta/" and its name, whatever its layer
 * folder ("meta/journal" of ".../meta/record/journal.c"). */
static void subsystem(const char *file, char *out, size_t len)
{
	const char *end, *start;

	if (!file) {
		snprintf(out, len, "pagefs");
		return;
	}
	end = strrchr(file, '.');
	start = strrchr(file, '/');
	if (start) {
		const char *p = start;
		while (p > file && p[-1] != '/')
			p--;
		start = p;
	} else {
		start = file;
	}
	if (!end || end < start)
		end = file + strlen(file);
	const char *base = strrchr(file, '/') ? strrchr(file, '/') + 1 : file;
	for (const char *m = strstr(file, "meta/"); m; m = strstr(m + 1, "meta/")) {
		if ((m == file || m[-1] == '/') && m + 5 < base && strchr(m + 5, '/') == base - 1) {
			snprintf(out, len, "meta/%.*s", (int)(end - base), base);
			return;
		}
	}
	snprintf(out, len, "%.*s", (int)(end - start), start);
}

void log_msg_from(enum log_level level, const char *file, const char *fmt, ...)
{
	char when[32], sub[64];
	struct timespec ts;
	struct tm tm;
	va_list ap;

	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S", &tm);
	subsystem(file, sub, sizeof(sub));

	pthread_mutex_lock(&log_lock);
	if (level <= log_level_now && log_syslog) {
		char msg[2048];
		va_start(ap, fmt);
		vsnprintf(msg, sizeof(msg), fmt, ap);
		va_end(ap);
		syslog(syslog_levels[level], "%s %s: %s", level_names[level], sub, msg);
	} else if (level <= log_level_now) {
		FILE *out = log_sink ? log_sink : stderr;
		fprintf(out, "%s.%03ldZ pagefs[%d] %s %s: ", when, ts.tv_nsec / 1000000,
		        (int)getpid(), level_names[level], sub);
		va_start(ap, fmt);
		vfprintf(out, fmt, ap);
		va_end(ap);
		fputc('\n', out);
	}
	pthread_mutex_unlock(&log_lock);
}
