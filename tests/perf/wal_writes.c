/*
 * wal_writes.c - what a commit's WAL writes cost in the kernel: the
 * frames of one commit written as SQLite writes them (a pwrite of each
 * 24-byte frame header and one of each page) against one write of the
 * same bytes, as meta/store/sqlite_gather.c gathers them
 * (docs/BENCHMARKS.md).
 *
 *   wal_writes [DIR] [FRAMES] [COMMITS]
 *
 * Writes COMMITS (20000) commits of FRAMES (4) frames of 4 KiB pages into
 * a file in DIR (/tmp), over the first 16 MiB again and again as a WAL
 * that checkpoints is, each way twice, and prints the CPU time of the
 * process per commit for each.
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PAGE 4096
#define HDR 24
#define SPAN (16 << 20)

static double cpu_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int put(int fd, const void *p, size_t n, off_t off)
{
	return pwrite(fd, p, n, off) == (ssize_t)n ? 0 : -1;
}

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/tmp";
	int frames = argc > 2 ? atoi(argv[2]) : 4, commits = argc > 3 ? atoi(argv[3]) : 20000;
	size_t frame = HDR + PAGE, commit = (size_t)frames * frame;
	char path[4096];

	if (frames < 1 || commits < 1 || commit > SPAN) {
		fprintf(stderr, "usage: wal_writes [DIR] [FRAMES 1..4000] [COMMITS]\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/wal_writes.XXXXXX", dir);
	int fd = mkstemp(path);
	unsigned char *buf = calloc(1, commit);
	if (fd < 0 || !buf) {
		perror(path);
		free(buf);
		return 1;
	}
	unlink(path);
	for (int round = 0; round < 4; round++) {
		int gathered = round % 2;
		double t0 = cpu_s();
		off_t off = 0;
		for (int c = 0; c < commits; c++) {
			if (off + (off_t)commit > SPAN)
				off = 0;
			int rc = 0;
			if (gathered)
				rc = put(fd, buf, commit, off);
			for (int f = 0; !gathered && f < frames && rc == 0; f++)
				rc = put(fd, buf, HDR, off + (off_t)(f * frame)) ||
				     put(fd, buf + HDR, PAGE, off + (off_t)(f * frame + HDR));
			if (rc) {
				perror("pwrite");
				free(buf);
				return 1;
			}
			off += (off_t)commit;
		}
		printf("%-30s %6.2f us a commit of %d frames\n",
		       gathered ? "one write a commit" : "a write a header and a page",
		       (cpu_s() - t0) / commits * 1e6, frames);
	}
	close(fd);
	free(buf);
	return 0;
}
