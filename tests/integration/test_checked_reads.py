"""Reads answered from the checksum check (README "Checksums"): an open
that verifies a page (--verify first after a mount, --verify always on
every open) reads the whole page to check it; for pages up to 1 MiB it
keeps those bytes and answers the reader's reads from them, until a read
reaches the end of the page, instead of reading the data file again. The
stats document counts such reads (reads_from_check) and the bytes open
readers keep for it (check_bytes_kept). Bytes are always exactly the
page's, whatever the order and size of the reads."""
import os
import random
import threading
import time

import pytest

from pagefs_helpers import assert_bytes_equal, opened, read_page, write_page

SMALL = ("--page-size", "64K", "--capacity", "4M")

pytestmark = pytest.mark.engines


def from_check(m):
    st = m.stats()
    return st["reads_from_check"], st["check_bytes_kept"]


def settled(m, want, timeout=5.0):
    """from_check(m) once it is want, or what it is after timeout seconds:
    the daemon sends the reply of the read that drops the copy before it
    frees the copy and counts it out (fs_file.c, read_kept), so a stats
    read right after that read returns can still count it."""
    deadline = time.monotonic() + timeout
    while True:
        got = from_check(m)
        if got == want or time.monotonic() > deadline:
            return got
        time.sleep(0.02)


def kept_settled(m, want=0, timeout=5.0):
    """check_bytes_kept once it is want, or what it is after timeout
    seconds. Two things put it behind: the read that drops a copy replies
    before it counts the copy out (see settled), and close() returns
    before the kernel's RELEASE arrives (the kernel sends a reader's
    release in the background, behind other background requests), so a
    stats read right after can still count copies just given back."""
    deadline = time.monotonic() + timeout
    while True:
        kept = from_check(m)[1]
        if kept == want or time.monotonic() > deadline:
            return kept
        time.sleep(0.02)


def test_the_first_read_after_a_mount_is_answered_from_the_check(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    data = os.urandom(40000)
    write_page(pool / "p", data)
    m.remount()  # --verify first: the next open verifies
    assert from_check(m) == (0, 0)
    assert_bytes_equal(read_page(pool / "p"), data, "first read after the remount")
    assert settled(m, (1, 0)) == (1, 0), "one read from the checked bytes, then nothing kept"
    # verified now: the next open does not check, and reads the data file
    assert_bytes_equal(read_page(pool / "p"), data, "second read")
    assert from_check(m) == (1, 0)


def test_reads_in_pieces_and_out_of_order_get_the_page_bytes(mount):
    m = mount(*SMALL, "--verify", "always")
    pool = m.pool(0, "kv")
    data = os.urandom(65536)
    write_page(pool / "p", data)
    before, _ = from_check(m)
    pieces = list(range(0, 65536, 4096))
    random.Random(7).shuffle(pieces)
    last = pieces.index(65536 - 4096)  # the read that reaches the end drops the bytes
    got = bytearray(65536)
    with opened(pool / "p") as fd:
        assert from_check(m)[1] == 65536, "the open keeps the checked page"
        for i, off in enumerate(pieces):
            got[off:off + 4096] = os.pread(fd, 4096, off)
            if i == last:
                want = (before + last + 1, 0)
                assert settled(m, want) == want, \
                    f"reads {last + 1} from the check, then the bytes are dropped"
        assert os.pread(fd, 4096, 65536) == b"", "a read at the end"
    assert_bytes_equal(bytes(got), data, "page read in shuffled 4 KiB pieces")
    assert from_check(m) == (before + last + 1, 0)


def test_a_reader_closed_before_the_end_gives_the_bytes_back(mount):
    m = mount(*SMALL, "--verify", "always")
    pool = m.pool(0, "kv")
    data = os.urandom(30000)
    write_page(pool / "p", data)
    with opened(pool / "p") as fd, opened(pool / "p") as fd2:
        assert from_check(m)[1] == 2 * 30000, "two opens, two checked copies"
        assert os.pread(fd, 100, 50) == data[50:150]
        assert os.pread(fd2, 30000, 0) == data
        assert kept_settled(m, 30000) == 30000, "the reader that reached the end dropped its copy"
    assert kept_settled(m) == 0, "closing the other reader gives its copy back"


def test_pages_over_one_mebibyte_are_checked_in_pieces_and_read_from_the_file(mount):
    m = mount("--page-size", "4M", "--capacity", "16M")
    pool = m.pool(0, "kv")
    data = os.urandom((3 << 20) + 123)
    write_page(pool / "big", data)
    m.remount()
    assert_bytes_equal(read_page(pool / "big"), data, "3 MiB page after the remount")
    assert from_check(m) == (0, 0), "a page over 1 MiB keeps nothing"


def test_concurrent_reads_of_one_descriptor_and_many_opens_get_exact_bytes(mount):
    """Threads read one descriptor in parallel (the kept bytes are shared
    while each read replies) and others open and read many pages, each
    open checking (--verify always). ASan runs this too."""
    m = mount(*SMALL, "--verify", "always")
    pool = m.pool(0, "kv")
    pages = {f"p{i}": os.urandom(65536 - 97 * i) for i in range(12)}
    for name, data in pages.items():
        write_page(pool / name, data)
    errors = []

    def shared_fd(name):
        data = pages[name]
        with opened(pool / name) as fd:
            def piece(off):
                try:
                    got = os.pread(fd, 8192, off)
                    if got != data[off:off + 8192]:
                        errors.append(f"{name} at {off}: wrong bytes")
                except OSError as e:
                    errors.append(f"{name} at {off}: {e}")
            ts = [threading.Thread(target=piece, args=(off,)) for off in range(0, len(data), 8192)]
            for t in ts:
                t.start()
            for t in ts:
                t.join()

    def many_opens(seed):
        rnd = random.Random(seed)
        for _ in range(60):
            name = rnd.choice(sorted(pages))
            got = read_page(pool / name)
            if got != pages[name]:
                errors.append(f"{name}: {len(got)} bytes, not the page's")

    ts = [threading.Thread(target=many_opens, args=(s,)) for s in range(4)]
    ts += [threading.Thread(target=shared_fd, args=(n,)) for n in sorted(pages)[:6]]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:5]
    assert kept_settled(m) == 0, "every reader closed: nothing kept"
    assert from_check(m)[0] > 0
