/*
 * fresh_memory.c - what a first touch of memory costs on this machine:
 * the benchmarks' spread between runs of one build and the "first
 * touches" part of tests/perf/http_profile.sh (docs/BENCHMARKS.md).
 *
 *   fresh_memory [MIB] [PAUSE_SECONDS] [huge|4k]
 *
 * Maps MIB MiB (256) as pagefs's index arena does (anonymous, huge pages
 * advised; with 4k advised against, as with PAGEFS_HUGE_HEAP=0) and
 * writes one byte in every 4 KiB, three times: memory the process never
 * had, the same amount mapped again at once (the kernel
 * hands back the pages just freed), and again after PAUSE_SECONDS (15).
 * Prints microseconds per 4 KiB and nanoseconds per byte for each. On a
 * virtual machine whose guest reports free pages to the host (virtio
 * balloon free page reporting), memory freed for a few seconds is the
 * host's again and its next first touch pays the host's fault too.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Maps size bytes with madvise advice, touches every 4 KiB, unmaps; the
 * seconds it took. */
static double touch(size_t size, int advice)
{
	double t0 = now_s();
	unsigned char *p =
		mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (p == MAP_FAILED) {
		perror("fresh_memory: mmap");
		exit(1);
	}
	(void)madvise(p, size, advice);
	for (size_t i = 0; i < size; i += 4096)
		p[i] = 1;
	double t = now_s() - t0;
	munmap(p, size);
	return t;
}

static void report(const char *what, size_t size, double t)
{
	printf("%-28s %8.2f us/4KiB %8.3f ns/byte\n", what, t * 1e6 / (double)(size / 4096),
	       t * 1e9 / (double)size);
}

int main(int argc, char **argv)
{
	size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256;
	unsigned pause = argc > 2 ? (unsigned)strtoul(argv[2], NULL, 10) : 15;
	const char *pages = argc > 3 ? argv[3] : "huge";
	int small = strcmp(pages, "4k") == 0, advice = small ? MADV_NOHUGEPAGE : MADV_HUGEPAGE;
	size_t size = mib << 20;
	char what[64];

	if (!mib || (!small && strcmp(pages, "huge") != 0)) {
		fprintf(stderr, "usage: fresh_memory [MIB] [PAUSE_SECONDS] [huge|4k]\n");
		return 2;
	}
	report("first touch", size, touch(size, advice));
	report("again at once", size, touch(size, advice));
	sleep(pause);
	snprintf(what, sizeof(what), "again after %u s", pause);
	report(what, size, touch(size, advice));
	return 0;
}
