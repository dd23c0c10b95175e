"""SPEC readdir: committed pages, each exactly once, even under concurrent churn."""
import collections
import errno
import hashlib
import os
import threading
import time

import pytest

from pagefs_helpers import write_page


def names(n, tag):
    return [f"{i:05d}-{tag}-" + hashlib.sha256(b"%d" % i).hexdigest() for i in range(n)]


def create_empty(pool, name):
    os.close(os.open(pool / name, os.O_WRONLY | os.O_CREAT, 0o644))


def pool_of_empty_pages(mount, n, tag):
    """A new mount's pool 0/kv holding n empty pages: (pool, their names)."""
    pool = mount().pool(0, "kv")
    want = names(n, tag)
    for name in want:
        create_empty(pool, name)
    return pool, want


def dupes(listing):
    return {n: c for n, c in collections.Counter(listing).items() if c > 1}


@pytest.mark.timeout_s(240)
def test_listing_2000_pages_returns_each_exactly_once(mount):
    pool, want = pool_of_empty_pages(mount, 2000, "stable")
    listing = os.listdir(pool)
    assert not dupes(listing), f"names listed more than once: {list(dupes(listing).items())[:10]}"
    assert set(listing) == set(want), \
        f"missing {sorted(set(want) - set(listing))[:10]}, extra {sorted(set(listing) - set(want))[:10]}"
    assert len(listing) == 2000
    scanned = [e.name for e in os.scandir(pool)]
    assert sorted(scanned) == sorted(want)
    assert all(e.is_file() for e in os.scandir(pool))


@pytest.mark.timeout_s(240)
def test_listed_inode_numbers_and_types_are_what_stat_says(mount):
    # The kernel asks for plain entries or entries with attributes
    # (readdirplus) as it sees fit (READDIRPLUS_AUTO): a listing of
    # several buffers gets both. Either kind must name the inode that a
    # lookup of the name then finds, as a regular file.
    pool, want = pool_of_empty_pages(mount, 2000, "ino")
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("2")  # forget the dentries the creates left
    entries = list(os.scandir(pool))
    assert sorted(e.name for e in entries) == sorted(want)
    wrong = [(e.name, e.inode(), os.stat(e.path).st_ino) for e in entries
             if not e.is_file(follow_symlinks=False) or e.inode() != os.stat(e.path).st_ino]
    assert not wrong, f"entries whose type or inode differs from stat: {wrong[:5]}"


@pytest.mark.timeout_s(240)
def test_listing_during_concurrent_creates_and_deletes_shows_stable_pages_exactly_once(mount):
    m = mount()
    pool = m.pool(0, "kv")
    stable = names(600, "stable")
    stable_set = set(stable)
    for n in stable:
        create_empty(pool, n)
    stop = threading.Event()
    errors = []
    churned = [0]

    def churn():
        made = collections.deque()
        i = 0
        try:
            while not stop.is_set():
                name = f"churn-{i:06d}-" + "c" * 60
                write_page(pool / name, b"c")
                made.append(name)
                if len(made) > 20:
                    os.unlink(pool / made.popleft())
                if i % 7 == 0 and made:
                    n = made.pop()
                    os.rename(pool / n, pool / (n + "-renamed"))
                    made.append(n + "-renamed")
                i += 1
                churned[0] = i
        except OSError as e:
            errors.append(e)

    t = threading.Thread(target=churn)
    t.start()
    try:
        rnd = 0
        end = time.monotonic() + 20
        while (rnd < 12 or churned[0] < 300) and time.monotonic() < end and not errors:
            rnd += 1
            listing = os.listdir(pool)
            c = collections.Counter(listing)
            missing = [n for n in stable if c[n] == 0]
            twice = {n: c[n] for n in stable if c[n] > 1}
            assert not missing, f"listing {rnd}: {len(missing)} stable pages missing, e.g. {missing[:5]}"
            assert not twice, f"listing {rnd}: stable pages listed more than once: {list(twice.items())[:5]}"
            stray = [n for n in c if not n.startswith("churn-") and n not in stable_set]
            assert not stray, f"listing {rnd}: names nobody created: {stray[:5]}"
    finally:
        stop.set()
        t.join(timeout=60)
    assert not errors, f"the churn thread failed: {errors[0]!r}"
    assert churned[0] >= 50, f"churn thread only made {churned[0]} pages; the test did not overlap"
    assert sorted(n for n in os.listdir(pool) if not n.startswith("churn-")) == sorted(stable)


def test_listing_an_empty_pool_and_a_missing_pool(mount):
    m = mount()
    pool = m.pool(0, "kv")
    assert os.listdir(pool) == []
    with pytest.raises(FileNotFoundError):
        os.listdir(m.path(0, "nope"))
    with pytest.raises(OSError) as ei:
        os.listdir(m.path(9))
    assert ei.value.errno == errno.ENOENT
