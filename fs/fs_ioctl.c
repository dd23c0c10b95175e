/*
 * fs_ioctl.c - the batch channel: one ioctl on a pool directory answers
 * for a whole batch of page names, on a plain mount (no --http). The wire
 * format, and what each op answers, is in pagefs_ioctl.h (for C clients;
 * python/pagefs/_wire.py speaks it too).
 *
 * LOOKUP_PIN pins through the open directory's handle (fs_pin.h): two
 * requests a batch (pin, unpin) instead of an open and a release per page
 * for a client that reads the data file itself. RESERVE and COMMIT (batch
 * writes) go to fs_batchw.c; PAGEFS_IOC_PLACE, on a page open for
 * writing, to fs_place.c. docs/SGLANG.md compares
 * this channel with a control file and xattrs.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>

#include "fs/fs_inode.h"
#include "fs/pagefs_ioctl.h"

/* Sizes of the header and of a record, for offsets in the buffer. */
#define FS_IOC_HDR sizeof(struct pagefs_ioc_hdr)
#define FS_IOC_REC sizeof(struct pagefs_ioc_rec)

/* Splits the request's names into names[] (pointers into in). 0 or
 * -EINVAL when the names are not count NUL-terminated strings. */
static int split_names(const char *in, const struct pagefs_ioc_hdr *h, const char **names)
{
	const char *p = in + FS_IOC_HDR;
	const char *end = p + h->bytes;

	for (uint32_t i = 0; i < h->count; i++) {
		const char *nul = memchr(p, '\0', (size_t)(end - p));

		if (!nul)
			return -EINVAL;
		names[i] = p;
		p = nul + 1;
	}
	return p == end ? 0 : -EINVAL;
}

/* EXISTS: names that are no page name (meta_check_name) are not asked
 * for; they answer 0. */
static int answer_exists(struct fs_mount *fs, uint32_t pool_id, const char **names,
                         struct pagefs_ioc_hdr *h, char *out, size_t *len)
{
	uint8_t *found = (uint8_t *)out + FS_IOC_HDR;
	uint8_t *asked_found;
	const char **asked;
	size_t n = 0;
	int ret;

	if (FS_IOC_HDR + (size_t)h->count > PAGEFS_IOC_SIZE)
		return -E2BIG;
	asked = calloc(h->count ? h->count : 1, sizeof(*asked));
	asked_found = calloc(h->count ? h->count : 1, 1);
	ret = asked && asked_found ? 0 : -ENOMEM;
	for (uint32_t i = 0; ret == 0 && i < h->count; i++)
		if (meta_check_name(names[i]) == 0)
			asked[n++] = names[i];
	if (ret == 0)
		ret = meta_keys_exists(fs->meta, pool_id, asked, n, asked_found);
	for (uint32_t i = 0, j = 0; ret == 0 && i < h->count; i++)
		found[i] = meta_check_name(names[i]) == 0 ? asked_found[j++] : 0;
	free((void *)asked);
	free(asked_found);
	if (ret < 0)
		return ret;
	h->bytes = h->count;
	*len = FS_IOC_HDR + h->count;
	return 0;
}

/* LOOKUP, and LOOKUP_PIN when d is not NULL: slots[] then receives the
 * pinned slots and *npinned their count; the caller keeps or drops them. */
static int answer_lookup(struct fs_mount *fs, uint32_t pool_id, const char **names,
                         struct pagefs_ioc_hdr *h, char *out, size_t *len, uint64_t *slots,
                         size_t *npinned)
{
	struct meta_pool_info pool;
	struct meta_page_info p;
	struct pagefs_ioc_rec rec;
	size_t path_len;
	size_t at = FS_IOC_HDR + (slots ? 2 : 1) * sizeof(uint64_t);
	int ret = meta_pool_get(fs->meta, pool_id, &pool);

	if (ret < 0)
		return ret;
	path_len = strlen(pool.data_file);
	if (at + (size_t)h->count * FS_IOC_REC + path_len + 1 > PAGEFS_IOC_SIZE)
		return -E2BIG;
	memcpy(out + FS_IOC_HDR, &pool.slot_size, sizeof(uint64_t));
	for (uint32_t i = 0; i < h->count; i++, at += FS_IOC_REC) {
		memset(&rec, 0, sizeof(rec));
		rec.err = meta_check_name(names[i]);
		if (rec.err == 0)
			rec.err = slots ? meta_page_lookup_pin(fs->meta, pool_id, names[i], &p)
			                : meta_page_lookup(fs->meta, pool_id, names[i], &p, NULL);
		if (rec.err == 0) {
			rec.flags = p.has_checksum ? 1U : 0U;
			if (slots) {
				slots[(*npinned)++] = p.slot;
				rec.flags |= PAGEFS_IOC_PINNED;
			}
			rec.ino = fs_ino_page(p.id, p.version);
			rec.offset = p.slot * pool.slot_size;
			rec.length = p.length;
			rec.checksum = p.checksum;
		}
		memcpy(out + at, &rec, sizeof(rec));
	}
	memcpy(out + at, pool.data_file, path_len + 1);
	h->bytes = (uint32_t)path_len;
	*len = at + path_len + 1;
	return 0;
}

/* LOOKUP_PIN: the pins are kept by d under the token the reply carries;
 * on any failure none is left. */
static int answer_lookup_pin(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id,
                             const char **names, struct pagefs_ioc_hdr *h, char *out, size_t *len)
{
	uint64_t *slots = calloc(h->count ? h->count : 1, sizeof(*slots));
	uint64_t token = 0;
	size_t n = 0;
	int ret;

	if (!slots)
		return -ENOMEM;
	/* The slots hold the answered pages' bytes only while this node is a
	 * node of its index (fs_file.c's open checks the same). */
	ret = meta_lease_hold(fs->meta);
	if (ret == 0)
		ret = answer_lookup(fs, pool_id, names, h, out, len, slots, &n);
	if (ret == 0)
		ret = fs_dirh_keep(d, pool_id, slots, n, &token);
	if (ret == 0)
		memcpy(out + FS_IOC_HDR + sizeof(uint64_t), &token, sizeof(token));
	else
		for (size_t i = 0; i < n; i++)
			meta_slot_unpin(fs->meta, pool_id, slots[i]);
	free(slots);
	return ret;
}

/* UNPIN: every token is dropped that d holds. */
static int answer_unpin(struct fs_mount *fs, struct fs_dirh *d, const char *in,
                        struct pagefs_ioc_hdr *h, size_t *len)
{
	int ret = 0;

	if (h->count != 0 || h->bytes % sizeof(uint64_t) != 0)
		return -EINVAL;
	for (uint32_t at = 0; at < h->bytes; at += sizeof(uint64_t)) {
		uint64_t token;

		memcpy(&token, in + FS_IOC_HDR + at, sizeof(token));
		if (fs_dirh_drop(d, fs->meta, token) < 0)
			ret = -EINVAL;
	}
	h->bytes = 0;
	*len = FS_IOC_HDR;
	return ret;
}

/* Answers the request in `in` into out; 0 with *len set, or -errno. d is
 * the pool directory's handle (NULL: no pins can be held, EBADF). */
static int answer(struct fs_mount *fs, struct fs_dirh *d, uint32_t pool_id, const char *in,
                  char *out, size_t *len)
{
	struct pagefs_ioc_hdr h;
	const char **names;
	int ret;

	memcpy(&h, in, sizeof(h));
	if (h.magic != PAGEFS_IOC_MAGIC || h.version != PAGEFS_IOC_VERSION ||
	    h.op < PAGEFS_IOC_EXISTS || h.op > PAGEFS_IOC_COMMIT ||
	    h.bytes > PAGEFS_IOC_SIZE - FS_IOC_HDR || h.count > h.bytes)
		return -EINVAL;
	if (h.op >= PAGEFS_IOC_LOOKUP_PIN && !d)
		return -EBADF;
	if (h.op == PAGEFS_IOC_UNPIN)
		ret = answer_unpin(fs, d, in, &h, len);
	else if (h.op == PAGEFS_IOC_COMMIT)
		ret = fs_batchw_commit(fs, d, pool_id, in, &h, out, len);
	else if (!(names = calloc(h.count ? h.count : 1, sizeof(*names))))
		ret = -ENOMEM;
	else {
		ret = split_names(in, &h, names);
		if (ret == 0 && h.op == PAGEFS_IOC_EXISTS)
			ret = answer_exists(fs, pool_id, names, &h, out, len);
		else if (ret == 0 && h.op == PAGEFS_IOC_LOOKUP)
			ret = answer_lookup(fs, pool_id, names, &h, out, len, NULL, NULL);
		else if (ret == 0 && h.op == PAGEFS_IOC_RESERVE)
			ret = fs_batchw_reserve(fs, d, pool_id, names, &h, out, len);
		else if (ret == 0)
			ret = answer_lookup_pin(fs, d, pool_id, names, &h, out, len);
		free((void *)names);
	}
	if (ret == 0)
		memcpy(out, &h, sizeof(h));
	return ret;
}

/* PAGEFS_IOC_PLACE on a page open for writing (fs_place.c). */
static void place(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, const void *in,
                  size_t in_bufsz, size_t out_bufsz)
{
	struct pagefs_ioc_place out;
	uint64_t id;
	int ret;

	if (fs_ino_kind(ino, &id) != FS_PAGE)
		return (void)fuse_reply_err(req, EBADF);
	if (in_bufsz != sizeof(out) || out_bufsz != sizeof(out))
		return (void)fuse_reply_err(req, EINVAL);
	ret = fs_writer_place(fs_of(req), fs_handle_of(fi), in, &out);
	if (ret < 0)
		return (void)fuse_reply_err(req, -ret);
	fuse_reply_ioctl(req, 0, &out, sizeof(out));
}

void pagefs_op_ioctl(fuse_req_t req, fuse_ino_t ino, unsigned int cmd, void *arg,
                     struct fuse_file_info *fi, unsigned flags, const void *in_buf, size_t in_bufsz,
                     size_t out_bufsz)
{
	uint64_t id;
	char *out;
	size_t len = 0;
	int ret;

	(void)arg;
	if (flags & FUSE_IOCTL_COMPAT)
		return (void)fuse_reply_err(req, ENOSYS);
	if (cmd == (unsigned int)PAGEFS_IOC_PLACE)
		return place(req, ino, fi, in_buf, in_bufsz, out_bufsz);
	if (cmd != (unsigned int)PAGEFS_IOC_BATCH)
		return (void)fuse_reply_err(req, ENOTTY);
	if (fs_ino_kind(ino, &id) != FS_POOL)
		return (void)fuse_reply_err(req, ENOTDIR);
	if (in_bufsz != PAGEFS_IOC_SIZE || out_bufsz != PAGEFS_IOC_SIZE)
		return (void)fuse_reply_err(req, EINVAL);
	out = calloc(1, PAGEFS_IOC_SIZE);
	if (!out)
		return (void)fuse_reply_err(req, ENOMEM);
	ret = answer(fs_of(req), fs_dirh_of(fi), (uint32_t)id, in_buf, out, &len);
	if (ret < 0)
		fuse_reply_err(req, -ret);
	else
		fuse_reply_ioctl(req, 0, out, len);
	free(out);
}
