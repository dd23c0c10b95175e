"""SPEC: errors of the backing mount (ENOSPC) reach the caller; nothing partial is committed."""
import errno
import os

import pageformat as PF
from pagefs_helpers import (assert_bytes_equal, describe, expect_errno, read_page, run_pagefs,
                            try_write_page)

MIB = 1 << 20


def test_full_backing_directory_reports_enospc_and_commits_nothing_partial(mount):
    m = mount(start=False)
    mount.mount_tmpfs(m.backing, "16M")
    m.start("--page-size", "1M", "--capacity", "64M")
    pool = m.pool(0, "kv")
    written = {}
    failure = None
    for i in range(40):
        name = f"page-{i:02d}"
        data = PF.make_page(name, i, MIB)
        failure = try_write_page(pool / name, data)
        if failure:
            break
        written[name] = data
    assert failure, "40 MiB of pages went into a 16 MiB backing directory without an error"
    stage, err = failure
    assert err == errno.ENOSPC, f"{name}: the backing ENOSPC should reach the writer, got " \
                                f"{errno.errorcode.get(err, err)} at {stage}"
    assert len(written) >= 8, f"only {len(written)} pages fit in 16 MiB"
    log = m.log.read_text()
    assert "cannot write page bytes into a data file: No space left on device" in log, \
        f"the daemon's log should say why writes fail:\n{log[-2000:]}"
    listing = set(os.listdir(pool))
    assert name not in listing, f"{name} failed with ENOSPC at {stage} but was committed"
    expect_errno(errno.ENOENT, os.stat, pool / name, what=f"stat of {name} after ENOSPC")
    assert listing == set(written), f"listing {sorted(listing)} != written {sorted(written)}"
    for n, d in written.items():
        assert_bytes_equal(read_page(pool / n), d, f"{n} after the backing dir filled up")
    victims = sorted(written)[:3]
    for n in victims:
        os.unlink(pool / n)
        del written[n]
    for j in range(2):
        n = f"after-{j}"
        d = PF.make_page(n, 100 + j, MIB)
        res = try_write_page(pool / n, d)
        assert res is None, f"{n}: writing after deleting {len(victims)} pages failed at {res[0]} " \
                            f"with {errno.errorcode.get(res[1], res[1])} (no remount)"
        written[n] = d
    assert set(os.listdir(pool)) == set(written)
    for n, d in written.items():
        assert_bytes_equal(read_page(pool / n), d, n)


def test_fsck_on_a_full_filesystem_names_the_full_disk_not_a_corrupt_index(mount):
    """Reading an index in WAL mode needs room for its -shm file: on a full
    filesystem fsck called a healthy index unreadable and suggested moving
    it away, which would throw every page away."""
    disk = mount.mount_tmpfs(mount.new_dir() / "disk", "4M")
    (disk / "backing").mkdir()
    m = mount(backing=disk / "backing", meta=f"sqlite:{disk}/index.db", start=False)
    m.start("--page-size", "64K", "--capacity", "16M")
    pool = m.pool(0, "kv")
    for i in range(10):
        (pool / f"p{i}").write_bytes(b"%d" % i)
    m.umount()
    filler = disk / "filler"
    with open(filler, "wb") as f:
        try:
            while True:
                f.write(b"\0" * MIB)
                f.flush()
        except OSError as e:
            assert e.errno == errno.ENOSPC, e
    r = run_pagefs("fsck", m.backing, "--meta", m.meta)
    assert r.returncode == 1, describe(r)
    assert "No space left on device" in r.stderr and "free some space" in r.stderr, describe(r)
    assert "move it away" not in r.stderr + r.stdout, describe(r)
    os.unlink(filler)
    r = run_pagefs("fsck", m.backing, "--meta", m.meta)
    assert r.returncode == 0 and "10 pages" in r.stdout, describe(r)
