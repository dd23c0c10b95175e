/*
 * tails.c - the text after the hex digits of page names, interned.
 *
 * SGLang's file backend names a page {sha256 hex}_{model}_{rank}_{size}.bin:
 * every page of a process shares the text after the digits, 23 bytes for
 * "_Qwen-Qwen3-32B_0_2.bin". pname.c keeps such a tail as a 2-byte id of
 * this table instead of its text. Only tails after a run of at least
 * TAIL_MIN_HEX digits are interned (pname.c decides), so names that are
 * not hashes (page-1, page-2, ...) do not fill the table with texts used
 * once.
 *
 * At most TAILS_MAX texts, for the life of the process (shared by every
 * index it opens): an id is never reused or freed, so a text, once
 * interned, has the same id for good, and past TAILS_MAX a new text is
 * simply not interned (its pages hold it inline). At most 65,535 texts of
 * at most 255 bytes: 17 MB in the worst case, a few bytes in practice.
 * Interning takes a mutex, but each thread first tries the text it
 * interned last (SGLang's pages of one process all end alike, and a
 * 10-million-page load interns 20 million times); reading a text by id
 * takes no lock: an id reaches a reader only through a page or this
 * thread's own earlier call, after the locks that published the text.
 */
#include "meta/index.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define SLOTS (2u * (TAILS_MAX + 1)) /* open addressing, at most half full */

struct tail {
	char *text;
	uint8_t len;
};

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct tail tails[TAILS_MAX + 1]; /* by id; 0 unused */
static uint16_t slots[SLOTS];            /* ids by hash of the text; 0 empty */
static unsigned count;
static _Thread_local uint16_t last; /* the id this thread interned last */

uint16_t index_tail_intern(const char *s, size_t len)
{
	uint16_t id = 0;

	if (len == 0 || len > UINT8_MAX)
		return 0;
	if (last && tails[last].len == len && memcmp(tails[last].text, s, len) == 0)
		return last;
	uint32_t i = (uint32_t)XXH3_64bits(s, len) & (SLOTS - 1);
	pthread_mutex_lock(&lock);
	for (; slots[i]; i = (i + 1) & (SLOTS - 1)) {
		const struct tail *t = &tails[slots[i]];
		if (t->len == len && memcmp(t->text, s, len) == 0) {
			id = slots[i];
			goto out;
		}
	}
	if (count < TAILS_MAX) {
		char *text = malloc(len);
		if (text) {
			memcpy(text, s, len);
			id = (uint16_t)++count;
			tails[id] = (struct tail){text, (uint8_t)len};
			slots[i] = id;
		}
	}
out:
	pthread_mutex_unlock(&lock);
	if (id)
		last = id;
	return id;
}

const char *index_tail_text(uint16_t id, size_t *len)
{
	*len = tails[id].len;
	return tails[id].text;
}
