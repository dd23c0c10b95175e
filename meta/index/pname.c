/*
 * pname.c - page names as struct page holds them: the leading lowercase
 * hex digits packed two to a byte, the rest as it is.
 *
 * SGLang names pages by a SHA-256 in hex (64 digits, and for its file
 * backend a suffix such as "_Qwen-Qwen3-32B_0_2.bin"): held as text, the
 * name was a third of the memory of a page. The longest even run of
 * [0-9a-f] at the start of a name (pname_hex digits) is held in
 * hex_bytes bytes, the rest of the name after it, without a NUL.
 * Only lowercase digits are packed, so a name has one packed form and
 * unpacking gives back the exact text; a name without such a run is held
 * as text (hex_bytes 0). After a run of at least TAIL_MIN_HEX digits, the
 * rest of the name (if 3 bytes or more) is held as the 2-byte id of its
 * interned text (tails.c: SGLang's file names share it). Lookups hash and
 * compare the text: the packed form is only unpacked where a page's hash
 * already matched, 32 digits at a time with SSE2 (a digit at a time cost
 * a lookup 500 instructions).
 */
#include "meta/index.h"

#include <stdlib.h>
#include <string.h>

/* Nibble + 1 of a lowercase hex digit, 0 for any other byte. */
static const uint8_t nibble[256] = {
	['0'] = 1,  ['1'] = 2,  ['2'] = 3,  ['3'] = 4,  ['4'] = 5,  ['5'] = 6,
	['6'] = 7,  ['7'] = 8,  ['8'] = 9,  ['9'] = 10, ['a'] = 11, ['b'] = 12,
	['c'] = 13, ['d'] = 14, ['e'] = 15, ['f'] = 16,
};

static const char digits[] = "0123456789abcdef";

#define TAIL_MIN_HEX 16 /* digits before a tail worth interning: a hash */
#define TAIL_MIN_LEN 3  /* bytes of tail worth an id of 2 */

#if defined(__SSE2__)
#include <emmintrin.h>

/* SSE2 (every x86-64): 16 bytes at a time, on the digits of whole groups
 * of 32; the scalar loops below finish the rest. */

/* Digits of 16 nibbles (values 0..15, one a byte). */
static inline __m128i digits16(__m128i nib)
{
	__m128i ascii = _mm_add_epi8(nib, _mm_set1_epi8('0'));
	__m128i letter = _mm_cmpgt_epi8(nib, _mm_set1_epi8(9));

	return _mm_add_epi8(ascii, _mm_and_si128(letter, _mm_set1_epi8('a' - '0' - 10)));
}

/* The 32 digits of 16 packed bytes at src: the first 16 in *a. */
static inline void unpack32(const unsigned char *src, __m128i *a, __m128i *b)
{
	__m128i v = _mm_loadu_si128((const __m128i *)src), low = _mm_set1_epi8(0x0f);
	__m128i hi = _mm_and_si128(_mm_srli_epi16(v, 4), low), lo = _mm_and_si128(v, low);

	*a = digits16(_mm_unpacklo_epi8(hi, lo));
	*b = digits16(_mm_unpackhi_epi8(hi, lo));
}

/* Bit i set where s[i] (of 16) is a lowercase hex digit; *nib: their
 * values. Bytes from 0x80 compare as negative, so below '0'. */
static inline unsigned digit_mask16(const char *s, __m128i *nib)
{
	__m128i c = _mm_loadu_si128((const __m128i *)s);
	__m128i dec = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('0' - 1)),
	                            _mm_cmpgt_epi8(_mm_set1_epi8('9' + 1), c));
	__m128i hex = _mm_and_si128(_mm_cmpgt_epi8(c, _mm_set1_epi8('a' - 1)),
	                            _mm_cmpgt_epi8(_mm_set1_epi8('f' + 1), c));

	*nib = _mm_sub_epi8(_mm_sub_epi8(c, _mm_set1_epi8('0')),
	                    _mm_and_si128(hex, _mm_set1_epi8('a' - '0' - 10)));
	return (unsigned)_mm_movemask_epi8(_mm_or_si128(dec, hex));
}
#endif

/* Digits of name held packed: the longest even run of lowercase hex at
 * its start (at most 254, what hex_bytes holds, halved). */
static size_t hex_run(const char *name, size_t len)
{
	size_t lim = len > 254 ? 254 : len, n = 0;

#if defined(__SSE2__)
	__m128i nib;
	for (; n + 16 <= lim; n += 16) {
		unsigned m = digit_mask16(name + n, &nib);
		if (m != 0xffff)
			return (n + (size_t)__builtin_ctz(~m)) & ~(size_t)1;
	}
#endif
	while (n < lim && nibble[(uint8_t)name[n]])
		n++;
	return n & ~(size_t)1;
}

/* The interned id of the tail of name after its hex digits, or 0. */
static uint16_t tail_of(const char *name, size_t len, size_t hex)
{
	if (hex < TAIL_MIN_HEX || len - hex < TAIL_MIN_LEN)
		return 0;
	return index_tail_intern(name + hex, len - hex);
}

size_t index_pname_plan(const char *name, size_t len, struct index_pname_plan *plan)
{
	size_t hex = hex_run(name, len);

	plan->hex = (uint8_t)hex;
	plan->tail = tail_of(name, len, hex);
	return hex / 2 + (plan->tail ? sizeof(uint16_t) : len - hex);
}

size_t index_pname_stored(const struct page *p)
{
	return p->hex_bytes +
	       (p->name_tail ? sizeof(uint16_t) : (size_t)(p->name_len - pname_hex(p)));
}

/* The text after p's digits, and its length. */
static const char *rest_of(const struct page *p, size_t *len)
{
	const unsigned char *rest = p->packed + p->hex_bytes;
	uint16_t id;

	if (!p->name_tail) {
		*len = p->name_len - pname_hex(p);
		return (const char *)rest;
	}
	memcpy(&id, rest, sizeof(id));
	return index_tail_text(id, len);
}

void index_pname_set(struct page *p, const char *name, size_t len,
                     const struct index_pname_plan *plan)
{
	size_t hex = plan->hex, i = 0;

#if defined(__SSE2__)
	for (; i + 32 <= hex; i += 32) { /* (even << 4) | odd in each 16-bit lane */
		__m128i a, b, even = _mm_set1_epi16(0x00ff);
		digit_mask16(name + i, &a);
		digit_mask16(name + i + 16, &b);
		a = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(a, even), 4), _mm_srli_epi16(a, 8));
		b = _mm_or_si128(_mm_slli_epi16(_mm_and_si128(b, even), 4), _mm_srli_epi16(b, 8));
		_mm_storeu_si128((__m128i *)(void *)(p->packed + i / 2), _mm_packus_epi16(a, b));
	}
#endif
	for (; i < hex; i += 2)
		p->packed[i / 2] = (unsigned char)(((nibble[(uint8_t)name[i]] - 1) << 4) |
		                                   (nibble[(uint8_t)name[i + 1]] - 1));
	if (plan->tail)
		memcpy(p->packed + hex / 2, &plan->tail, sizeof(plan->tail));
	else
		memcpy(p->packed + hex / 2, name + hex, len - hex);
	p->name_len = (uint8_t)len;
	p->hex_bytes = (uint8_t)(plan->hex / 2);
	p->name_tail = plan->tail != 0;
}

int index_pname_eq(const struct page *p, const char *name, size_t len)
{
	size_t hex = pname_hex(p), i = 0;

	if (p->name_len != len)
		return 0;
#if defined(__SSE2__)
	for (; i + 32 <= hex; i += 32) {
		__m128i a, b;
		unpack32(p->packed + i / 2, &a, &b);
		a = _mm_cmpeq_epi8(a, _mm_loadu_si128((const __m128i *)(const void *)(name + i)));
		b = _mm_cmpeq_epi8(b,
		                   _mm_loadu_si128((const __m128i *)(const void *)(name + i + 16)));
		if (_mm_movemask_epi8(_mm_and_si128(a, b)) != 0xffff)
			return 0;
	}
#endif
	for (; i < hex; i += 2) {
		unsigned char b = p->packed[i / 2];
		if (name[i] != digits[b >> 4] || name[i + 1] != digits[b & 15])
			return 0;
	}
	size_t n;
	const char *rest = rest_of(p, &n);
	return n == len - hex && memcmp(rest, name + hex, n) == 0;
}

int index_pname_same(const struct page *a, const struct page *b)
{
	char text[META_NAME_MAX + 1];

	if (a->name_len != b->name_len || a->hex_bytes != b->hex_bytes)
		return 0;
	if (a->name_tail == b->name_tail) /* one form: an interned text has one id */
		return memcmp(a->packed, b->packed, index_pname_stored(a)) == 0;
	return index_pname_eq(a, index_pname_text(b, text), b->name_len);
}

char *index_pname_text(const struct page *p, char *out)
{
	size_t hex = pname_hex(p), i = 0;

#if defined(__SSE2__)
	for (; i + 32 <= hex; i += 32) {
		__m128i a, b;
		unpack32(p->packed + i / 2, &a, &b);
		_mm_storeu_si128((__m128i *)(void *)(out + i), a);
		_mm_storeu_si128((__m128i *)(void *)(out + i + 16), b);
	}
#endif
	for (; i < hex; i += 2) {
		unsigned char b = p->packed[i / 2];
		out[i] = digits[b >> 4];
		out[i + 1] = digits[b & 15];
	}
	size_t n;
	const char *rest = rest_of(p, &n);
	memcpy(out + hex, rest, n);
	out[p->name_len] = '\0';
	return out;
}
