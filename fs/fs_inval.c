/*
 * fs_inval.c - the invalidation thread (see fs_inval.h for why it exists).
 *
 * A FIFO of requests under one mutex; the thread pops one, drops the
 * mutex and writes the notification to the FUSE device. Order matters
 * only per name and the single thread keeps it. An invalidation is never
 * wrong to send, only wasted, so errors (-ENOENT: the kernel had nothing
 * cached) are ignored.
 *
 * Stopping: a notification can block inside the kernel on a directory
 * lock held by a task that waits for a request nobody will serve once
 * the session loop ended (SIGTERM under load). stop() waits a moment,
 * then aborts the kernel connection through fusectl if it is mounted,
 * which fails every pending request and releases that lock.
 */
#include "fs/fs_inval.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "fs/fs_inode.h"
#include "meta/log.h"

struct inval_item {
	struct inval_item *next;
	uint64_t seq;    /* queue order, for fs_inval_wait */
	uint64_t parent; /* entry: the directory; 0 for an inode */
	uint64_t ino;    /* inode: the inode (a pool: its attributes only) */
	size_t namelen;
	char name[];
};

#define POOLS_SERVED 4096

struct fs_inval {
	pthread_mutex_t lock;
	pthread_cond_t wake;
	pthread_cond_t sent;      /* sent_seq advanced, or stop */
	uint64_t queued_seq;      /* protected by lock */
	uint64_t sent_seq;        /* protected by lock: every item <= it was sent */
	struct inval_item *head;  /* protected by lock */
	struct inval_item **tail; /* protected by lock */
	int stop;                 /* protected by lock */
	int running;              /* thread exists; set and cleared by the owner */
	pthread_t thread;
	struct fuse_session *se; /* set before the thread starts */
	char abort_path[64];     /* fusectl abort file of our connection, or "" */
	/* Pools whose attributes a reply gave since their last invalidation,
	 * by pool id modulo POOLS_SERVED (a collision costs one needless
	 * invalidation). */
	_Atomic unsigned char served[POOLS_SERVED];
};

int fs_inval_new(struct fs_inval **out)
{
	struct fs_inval *iv = calloc(1, sizeof(*iv));

	if (!iv)
		return -ENOMEM;
	pthread_mutex_init(&iv->lock, NULL);
	pthread_cond_init(&iv->wake, NULL);
	pthread_cond_init(&iv->sent, NULL);
	iv->tail = &iv->head;
	*out = iv;
	return 0;
}

/* Queues one item; returns its sequence number (0 if it was dropped). */
static uint64_t queue(struct fs_inval *iv, uint64_t parent, uint64_t ino, const char *name)
{
	size_t len = name ? strlen(name) : 0;
	struct inval_item *it = malloc(sizeof(*it) + len + 1);
	uint64_t seq;

	if (!it) {
		log_error("cannot queue a kernel cache invalidation: out of memory");
		return 0;
	}
	it->next = NULL;
	it->parent = parent;
	it->ino = ino;
	it->namelen = len;
	memcpy(it->name, name ? name : "", len + 1);

	pthread_mutex_lock(&iv->lock);
	if (iv->stop) {
		pthread_mutex_unlock(&iv->lock);
		free(it);
		return 0;
	}
	seq = it->seq = ++iv->queued_seq;
	*iv->tail = it;
	iv->tail = &it->next;
	pthread_cond_signal(&iv->wake);
	pthread_mutex_unlock(&iv->lock);
	return seq;
}

uint64_t fs_inval_entry(struct fs_inval *iv, uint64_t parent, const char *name)
{
	return queue(iv, parent, 0, name);
}

int fs_inval_wait(struct fs_inval *iv, uint64_t seq, int timeout_ms)
{
	struct timespec until;
	int done;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += timeout_ms / 1000;
	until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
	if (until.tv_nsec >= 1000000000L) {
		until.tv_sec++;
		until.tv_nsec -= 1000000000L;
	}
	pthread_mutex_lock(&iv->lock);
	while (seq && iv->sent_seq < seq && !iv->stop &&
	       pthread_cond_timedwait(&iv->sent, &iv->lock, &until) == 0)
		;
	done = !seq || iv->sent_seq >= seq;
	pthread_mutex_unlock(&iv->lock);
	return done ? 0 : -ETIMEDOUT;
}

void fs_inval_inode(struct fs_inval *iv, uint64_t ino)
{
	queue(iv, 0, ino, NULL);
}

void fs_inval_pool_served(struct fs_inval *iv, uint32_t pool_id)
{
	atomic_store(&iv->served[pool_id % POOLS_SERVED], 1);
}

void fs_inval_pool(struct fs_inval *iv, uint32_t pool_id, int now)
{
	if (!atomic_exchange(&iv->served[pool_id % POOLS_SERVED], 0))
		return;
	if (now && iv->se)
		fuse_lowlevel_notify_inval_inode(iv->se, fs_ino_pool(pool_id), -1, 0);
	else
		fs_inval_inode(iv, fs_ino_pool(pool_id));
}

void fs_inval_on_drop(void *arg, uint32_t pool_id, uint64_t page_id, const char *name)
{
	(void)page_id;
	fs_inval_entry(arg, fs_ino_pool(pool_id), name);
	fs_inval_pool(arg, pool_id, 0);
}

void fs_inval_on_dir(void *arg, int rank, const char *ns)
{
	char name[16];

	if (ns) {
		fs_inval_entry(arg, fs_ino_rank(rank), ns);
		return;
	}
	snprintf(name, sizeof(name), "%d", rank);
	fs_inval_entry(arg, FUSE_ROOT_ID, name);
}

static void send_one(struct fs_inval *iv, const struct inval_item *it)
{
	uint64_t id;
	int ret;

	if (it->parent)
		ret = fuse_lowlevel_notify_inval_entry(iv->se, it->parent, it->name, it->namelen);
	else
		ret = fuse_lowlevel_notify_inval_inode(
			iv->se, it->ino, fs_ino_kind(it->ino, &id) == FS_POOL ? -1 : 0, 0);
	if (ret < 0 && ret != -ENOENT)
		log_debug("kernel invalidation of %s (inode %llu) failed: %s",
		          it->parent ? it->name : "inode",
		          (unsigned long long)(it->parent ? it->parent : it->ino), strerror(-ret));
}

static void *inval_main(void *arg)
{
	struct fs_inval *iv = arg;

	pthread_mutex_lock(&iv->lock);
	for (;;) {
		struct inval_item *it;

		while (!iv->head && !iv->stop)
			pthread_cond_wait(&iv->wake, &iv->lock);
		if (iv->stop)
			break;
		it = iv->head;
		iv->head = it->next;
		if (!iv->head)
			iv->tail = &iv->head;
		pthread_mutex_unlock(&iv->lock);
		send_one(iv, it);
		pthread_mutex_lock(&iv->lock);
		iv->sent_seq = it->seq;
		pthread_cond_broadcast(&iv->sent);
		free(it);
	}
	pthread_mutex_unlock(&iv->lock);
	return NULL;
}

/* Undoes the octal escapes of /proc/self/mountinfo (\040 for a space). */
static void unescape(char *s)
{
	char *out = s;

	while (*s) {
		if (s[0] == '\\' && s[1] >= '0' && s[1] <= '3' && s[2] >= '0' && s[2] <= '7' &&
		    s[3] >= '0' && s[3] <= '7') {
			*out++ = (char)((s[1] - '0') * 64 + (s[2] - '0') * 8 + (s[3] - '0'));
			s += 4;
		} else {
			*out++ = *s++;
		}
	}
	*out = '\0';
}

/* Finds the fusectl abort file of the newest mount on mountpoint. Reads
 * only /proc, never the mount itself (nobody may be serving it yet). */
static void find_connection(struct fs_inval *iv, const char *mountpoint)
{
	char line[8192];
	char path[4096];
	unsigned major, minor;
	FILE *f = fopen("/proc/self/mountinfo", "re");

	iv->abort_path[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &major, &minor, path) != 3)
			continue;
		unescape(path);
		if (strcmp(path, mountpoint) == 0)
			snprintf(iv->abort_path, sizeof(iv->abort_path),
			         "/sys/fs/fuse/connections/%u/abort", (major << 20) | minor);
	}
	fclose(f);
}

int fs_inval_start(struct fs_inval *iv, struct fuse_session *se, const char *mountpoint)
{
	int ret;

	iv->se = se;
	find_connection(iv, mountpoint);
	ret = pthread_create(&iv->thread, NULL, inval_main, iv);
	if (ret)
		return -ret;
	iv->running = 1;
	return 0;
}

static int join_within(pthread_t t, int seconds)
{
	struct timespec until;

	clock_gettime(CLOCK_REALTIME, &until);
	until.tv_sec += seconds;
	return pthread_timedjoin_np(t, NULL, &until);
}

static void abort_connection(const char *path)
{
	int fd = path[0] ? open(path, O_WRONLY | O_CLOEXEC) : -1;

	if (fd < 0) {
		log_error("the invalidation thread is stuck in the kernel and the FUSE connection "
		          "cannot be aborted (%s); abort it with 'echo 1 > "
		          "/sys/fs/fuse/connections/N/abort' after mounting fusectl",
		          path[0] ? strerror(errno) : "connection not found");
		return;
	}
	log_warn("aborting the FUSE connection to unblock the invalidation thread");
	if (write(fd, "1", 1) < 0)
		log_error("cannot abort the FUSE connection via %s: %s", path, strerror(errno));
	close(fd);
}

int fs_inval_stop(struct fs_inval *iv)
{
	struct inval_item *it;

	pthread_mutex_lock(&iv->lock);
	iv->stop = 1;
	pthread_cond_broadcast(&iv->sent);
	it = iv->head;
	iv->head = NULL;
	iv->tail = &iv->head;
	pthread_cond_signal(&iv->wake);
	pthread_mutex_unlock(&iv->lock);
	while (it) {
		struct inval_item *next = it->next;

		free(it);
		it = next;
	}
	if (!iv->running)
		return 0;
	if (join_within(iv->thread, 2) != 0) {
		abort_connection(iv->abort_path);
		if (join_within(iv->thread, 5) != 0) {
			pthread_detach(iv->thread);
			iv->running = 0;
			return -EBUSY;
		}
	}
	iv->running = 0;
	return 0;
}

void fs_inval_free(struct fs_inval *iv)
{
	if (!iv)
		return;
	pthread_cond_destroy(&iv->wake);
	pthread_cond_destroy(&iv->sent);
	pthread_mutex_destroy(&iv->lock);
	free(iv);
}
