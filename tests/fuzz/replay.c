/*
 * replay.c - runs a fuzz target over its seed corpus without libFuzzer, so
 * that every build (gcc, the ASan/UBSan build of the tests) compiles the
 * targets and replays the inputs they keep, regressions included:
 *
 *   replay_fuzz_NAME DIR|FILE...
 *
 * Each file is one input to LLVMFuzzerTestOneInput; a failed check aborts
 * (tests/fuzz/fuzz_index.h). Prints how many inputs ran. libFuzzer itself
 * (scripts/soak.sh, PAGEFS_FUZZ=ON) is what explores new inputs.
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
/* Defined by the targets that keep a copy of stderr (fuzz_index.h). */
__attribute__((weak)) int LLVMFuzzerInitialize(int *argc, char ***argv);

/* Runs one file; 0, or -1 if it cannot be read. */
static int run_file(const char *path)
{
	FILE *f = fopen(path, "rb");
	struct stat st;

	if (!f || fstat(fileno(f), &st) < 0) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		if (f)
			fclose(f);
		return -1;
	}
	size_t size = (size_t)st.st_size;
	uint8_t *data = malloc(size ? size : 1);
	if (!data || fread(data, 1, size, f) != size) {
		fprintf(stderr, "replay: cannot read %s\n", path);
		free(data);
		fclose(f);
		return -1;
	}
	fclose(f);
	LLVMFuzzerTestOneInput(data, size);
	free(data);
	return 0;
}

/* Runs every regular file of dir, in name order; the count, or -1. */
static long run_dir(const char *dir)
{
	struct dirent **names;
	int n = scandir(dir, &names, NULL, alphasort);
	long ran = 0;

	if (n < 0) {
		fprintf(stderr, "replay: cannot list %s\n", dir);
		return -1;
	}
	for (int i = 0; i < n; i++) {
		char path[4096];
		struct stat st;
		snprintf(path, sizeof(path), "%s/%s", dir, names[i]->d_name);
		if (stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
			if (run_file(path) < 0)
				ran = -1;
			else if (ran >= 0)
				ran++;
		}
		free(names[i]);
	}
	free(names);
	return ran;
}

int main(int argc, char **argv)
{
	long total = 0;

	if (argc < 2) {
		fprintf(stderr, "usage: %s DIR|FILE...\n", argv[0]);
		return 2;
	}
	if (LLVMFuzzerInitialize)
		LLVMFuzzerInitialize(&argc, &argv);
	for (int i = 1; i < argc; i++) {
		struct stat st;
		long ran = stat(argv[i], &st) == 0 && S_ISDIR(st.st_mode)
		                   ? run_dir(argv[i])
		                   : (run_file(argv[i]) < 0 ? -1 : 1);
		if (ran < 0)
			return 1;
		total += ran;
	}
	printf("replay: %ld inputs, every check held\n", total);
	return total > 0 ? 0 : 1;
}
