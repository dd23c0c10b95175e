"""Disk full under the metadata file (SPEC "Durability and crashes"): a
commit that cannot be written to the index fails the close() with ENOSPC
and publishes nothing; pages whose close() returned stay; once space is
back the mount works on without a remount, and everything survives a
remount and fsck."""
import errno
import os

import pytest

from pagefs_helpers import describe, read_page, run_pagefs, try_write_page


@pytest.mark.timeout_s(180)
def test_full_index_filesystem_fails_commits_with_enospc_and_loses_nothing(mount):
    probe = mount(start=False)
    meta_dir = probe.factory.mount_tmpfs(probe.dir / "metafs", "2M")
    m = mount("--page-size", "4K", "--capacity", "64M", meta=f"sqlite:{meta_dir / 'index.db'}")
    pool = m.pool(0, "kv")
    filler = meta_dir / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)  # leave the index little room
    try:
        while os.write(fd, b"\1" * 4096) > 0:
            pass
    except OSError as e:
        assert e.errno == errno.ENOSPC
    os.close(fd)
    os.truncate(filler, max(0, os.path.getsize(filler) - 64 * 1024))
    committed, failures = [], []
    name_pad = "k" * 200  # long names fill the index quickly
    for i in range(20000):
        name = f"{name_pad}{i}"
        got = try_write_page(pool / name, name.encode())
        if got is None:
            committed.append(name)
        else:
            failures.append(got)
            if len(failures) >= 3:
                break
    assert failures, f"the index never filled up ({len(committed)} pages committed)"
    print(f"[index-full] {len(committed)} commits before ENOSPC: {failures}")
    assert all(g == ("close", errno.ENOSPC) for g in failures), \
        f"a commit into a full index should fail close() with ENOSPC: {failures}"
    listing = set(os.listdir(pool))
    assert listing == set(committed), "pages whose close() failed must not be visible"
    os.unlink(filler)  # space is back: no remount needed
    for i in range(3):
        name = f"after{i}"
        assert try_write_page(pool / name, b"after") is None
        committed.append(name)
    m.umount()
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--verify-data", timeout=120)
    assert r.returncode == 0, describe(r)
    m.start()
    assert set(os.listdir(pool)) == set(committed)
    for name in committed[:: max(1, len(committed) // 50)]:
        want = b"after" if name.startswith("after") else name.encode()
        assert read_page(pool / name) == want
