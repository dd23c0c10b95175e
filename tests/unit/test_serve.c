/*
 * test_serve.c - the 3FS metadata protocol answered in-process
 * (serve_request in serve/serve.c, no socket) from the fixture's index:
 * the replies of a reserve/confirm/get round trip, the reply text's
 * numbers, and the regressions fuzz_serve found.
 */
#include "fixture.h"

#include "serve/body.h"
#include "serve/serve.h"

#include <limits.h>

#include <stdlib.h>
#include <sys/vfs.h>

TestSuite(serve, .init = fx_setup, .fini = fx_teardown, .timeout = 30);

struct reply {
	unsigned status;
	char *body; /* NULL for 204 */
};

static struct reply post(const char *url, const char *body)
{
	struct reply r = {0};
	size_t len = 0;
	int ret = serve_request(fx.m, url, "POST", body, strlen(body), &r.status, &r.body, &len);

	cr_assert_eq(ret, 0, "POST %s: %s", url, strerror(-ret));
	cr_assert(!r.body || strlen(r.body) == len, "POST %s: reply length %zu", url, len);
	return r;
}

static void expect(const char *url, const char *body, unsigned status, const char *want)
{
	struct reply r = post(url, body);

	cr_assert_eq(r.status, status, "POST %s %s: %u %s, want %u", url, body, r.status,
	             r.body ? r.body : "", status);
	if (want)
		cr_assert_str_eq(r.body ? r.body : "", want, "POST %s %s", url, body);
	free(r.body);
}

Test(serve, reserve_confirm_get_round_trip)
{
	expect("/1/initialize", "{\"num_pages\": 4}", 204, NULL);
	expect("/1/reserve_and_allocate_page_indices", "{\"keys\": [[\"k\", \"\"]]}", 200,
	       "{\"indices\":[[false,3]]}");
	expect("/1/confirm_write", "{\"written_keys_to_confirm\": [[\"k\", 3]]}", 204, NULL);
	expect("/1/get_page_indices", "{\"keys\": [\"k\", \"x\"]}", 200, "{\"indices\":[3,null]}");
	expect("/1/exists", "{\"keys\": [\"k\"]}", 200, "{\"exists\":[true]}");
	expect("/2/exists", "{\"keys\": [\"k\"]}", 404, NULL);
	expect("/1/exists", "{\"keys\": [", 422, NULL);
}

/* fuzz_serve: a data file larger than the backing filesystem allows made
 * initialize answer 500 (an index error) instead of saying what to fix. */
Test(serve, initialize_beyond_the_backing_filesystem_is_a_409_that_names_the_fix)
{
	struct reply r = post("/0/initialize", "{\"num_pages\": 1099511627776, \"namespace\": "
	                                       "\"big\"}"); /* 2^40 pages of 4 KiB: 4 PiB */

	if (r.status == 204) {
		free(r.body);
		cr_skip_test("the filesystem of %s holds a 4 PiB sparse file", fx.backing);
	}
	cr_assert_eq(r.status, 409, "%u %s", r.status, r.body ? r.body : "");
	cr_assert(r.body && strstr(r.body, "ask for fewer pages"), "%s", r.body);
	free(r.body);
}

Test(serve, out_int_writes_every_long_long_as_printf_does)
{
	const long long v[] = {0, 7, -1, 10, 99, 100, 1234567890123LL, LLONG_MAX, LLONG_MIN};
	struct out o = {0};
	char want[512] = "";

	for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++) {
		out_int(&o, v[i]);
		out_add(&o, " ", 1);
		snprintf(want + strlen(want), sizeof(want) - strlen(want), "%lld ", v[i]);
	}
	cr_assert_not(o.oom);
	cr_assert_str_eq(o.buf, want);
	free(o.buf);
}

Test(serve, batch_replies_carry_slots_of_several_digits)
{
	expect("/1/initialize", "{\"num_pages\": 1000}", 204, NULL);
	expect("/1/reserve_and_allocate_page_indices", "{\"keys\": [[\"a\", \"\"], [\"b\", \"\"]]}",
	       200, "{\"indices\":[[false,999],[false,998]]}");
	expect("/1/confirm_write", "{\"written_keys_to_confirm\": [[\"a\", 999], [\"b\", 998]]}",
	       204, NULL);
	expect("/1/reserve_and_allocate_page_indices", "{\"keys\": [[\"a\", \"\"]]}", 200,
	       "{\"indices\":[[true,999]]}");
	expect("/1/get_page_indices", "{\"keys\": [\"b\", \"z\", \"a\"]}", 200,
	       "{\"indices\":[998,null,999]}");
}
