/*
 * names.c - validation of rank, namespace and page names, and the size
 * syntax ("4096", "64K", "16M", "1G", "1T") shared by every command and
 * by the settable pool xattrs.
 */
#include "meta/meta.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

int meta_parse_rank(const char *s)
{
	long v = 0;
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > 5 || (n > 1 && s[0] == '0'))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		if (s[i] < '0' || s[i] > '9')
			return -EINVAL;
		v = v * 10 + (s[i] - '0');
	}
	return v > META_RANK_MAX ? -EINVAL : (int)v;
}

int meta_check_ns(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > META_NS_MAX)
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_'))
			return -EINVAL;
	}
	return 0;
}

int meta_check_name(const char *s)
{
	size_t n;
	return meta_check_name_len(s, &n);
}

int meta_check_name_len(const char *s, size_t *len)
{
	/* one pass: the first '/' or the end */
	const char *e = s ? strchrnul(s, '/') : NULL;
	size_t n = e ? (size_t)(e - s) : 0;

	*len = n;
	if (n == 0 || *e || (s[0] == '.' && (n == 1 || (n == 2 && s[1] == '.'))))
		return -EINVAL;
	if (n > META_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

int meta_check_prefix(const char *s)
{
	size_t n = s ? strlen(s) : 0;

	if (n == 0 || n > META_PREFIX_MAX || strstr(s, ".."))
		return -EINVAL;
	for (size_t i = 0; i < n; i++) {
		char c = s[i];
		if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
		      c == '_' || c == '.' || c == '-'))
			return -EINVAL;
	}
	return 0;
}

int meta_parse_size(const char *s, uint64_t *out)
{
	uint64_t v = 0;
	unsigned shift = 0;
	size_t i = 0;

	if (!s || !s[0])
		return -EINVAL;
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		uint64_t d = (uint64_t)(s[i] - '0');
		if (v > (UINT64_MAX - d) / 10)
			return -EINVAL;
		v = v * 10 + d;
	}
	if (i == 0)
		return -EINVAL;
	switch (s[i]) {
	case '\0':
		shift = 0;
		break;
	case 'K':
	case 'k':
		shift = 10;
		break;
	case 'M':
	case 'm':
		shift = 20;
		break;
	case 'G':
	case 'g':
		shift = 30;
		break;
	case 'T':
	case 't':
		shift = 40;
		break;
	default:
		return -EINVAL;
	}
	if (s[i] && s[i + 1] != '\0')
		return -EINVAL;
	if (shift && v > (UINT64_MAX >> shift))
		return -EINVAL;
	*out = v << shift;
	return 0;
}

int meta_parse_size_value(const char *value, size_t size, uint64_t *out)
{
	char buf[64];

	while (size > 0 && (value[size - 1] == '\n' || value[size - 1] == '\0'))
		size--;
	/* A NUL inside the value would end the string early: "1M\0junk". */
	if (size == 0 || size >= sizeof(buf) || memchr(value, '\0', size))
		return -EINVAL;
	memcpy(buf, value, size);
	buf[size] = '\0';
	if (meta_parse_size(buf, out) < 0 || *out == 0)
		return -EINVAL;
	return 0;
}

void meta_format_size(uint64_t bytes, char *buf, size_t len)
{
	static const char units[] = "KMGT";
	int u = -1;

	while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
		bytes /= 1024;
		u++;
	}
	if (u < 0)
		snprintf(buf, len, "%llu", (unsigned long long)bytes);
	else
		snprintf(buf, len, "%llu%c", (unsigned long long)bytes, units[u]);
}
