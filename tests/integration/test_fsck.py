"""`pagefs fsck`: one deliberately broken index or data file per problem code
of meta/ops/fsck.c. Each test checks the report (code and message), the exit
status, the repaired state (index rows, data files, what a new mount serves)
and that a second run after --repair comes back clean (exit 0).

The broken states are made offline, after a clean umount, with sqlite3 on
the index (schema in meta/store/store_sqlite.c) or by editing the data files.
"""
import os
import re
import sqlite3

import pytest

import metaclient as MC
import pageformat as PF
from pagefs_helpers import describe, read_page, run_pagefs, write_page, xattr_int, xattr_str
from test_checksums import XXH3

SLOT = 64 << 10
CAP = 16


def fsck(m, *args):
    return run_pagefs("fsck", m.backing, "--meta", m.meta, *args, timeout=120)


def problems(r):
    """{code: [message, ...]} of the report lines of a fsck run."""
    out = {}
    for line in r.stdout.splitlines():
        mm = re.match(r"^([a-z][a-z-]+) +(.*)$", line)
        if mm and not line.startswith("pagefs fsck:"):
            out.setdefault(mm.group(1), []).append(mm.group(2))
    return out


def db(m):
    return sqlite3.connect(m.index)


def rows(m, sql, *args):
    c = db(m)
    try:
        return c.execute(sql, args).fetchall()
    finally:
        c.close()


def edit(m, *stmts):
    c = db(m)
    try:
        for s in stmts:
            if isinstance(s, tuple):
                c.execute(*s)
            else:
                c.execute(s)
        c.commit()
    finally:
        c.close()


class Pages:
    """A mount with pages p0..p3 in 0/kv and q0, q1 in 1/mamba, then unmounted."""

    def __init__(self, mount):
        self.m = mount("--page-size", "64K", "--capacity", "1M")
        self.content = {}
        self.where = {}
        for pool, names in (((0, "kv"), ["p0", "p1", "p2", "p3"]), ((1, "mamba"), ["q0", "q1"])):
            d = self.m.pool(*pool)
            for i, n in enumerate(names):
                data = PF.make_page(n, 1, 1000 + 5000 * i)
                write_page(d / n, data)
                self.content[n] = (pool, data)
                self.where[n] = (xattr_str(d / n, "user.pagefs.data_file"),
                                 xattr_int(d / n, "user.pagefs.offset"),
                                 xattr_int(d / n, "user.pagefs.slot"))
        self.m.umount()
        r = fsck(self.m, "--verify-data")
        assert r.returncode == 0, f"fsck of the fresh index is not clean: {describe(r)}"
        assert "(clean)" in r.stdout

    def data_file(self, name):
        return self.where[name][0]

    def break_and_check(self, code, *, expect_in_msg=(), verify=False, repairable=True):
        """Runs fsck (expects `code`), fsck --repair, and fsck again."""
        extra = ["--verify-data"] if verify else []
        r = fsck(self.m, *extra)
        assert r.returncode == 1, f"fsck should find {code}: {describe(r)}"
        found = problems(r)
        assert code in found, f"fsck did not report {code}: {describe(r)}"
        for s in expect_in_msg:
            assert any(s in msg for msg in found[code]), \
                f"the {code} message should mention {s!r}: {found[code]}"
        assert "--repair" in r.stdout, f"an unrepaired report should name --repair: {r.stdout}"
        r = fsck(self.m, "--repair", *extra)
        assert r.returncode == 1, f"fsck --repair exits 1 when it found problems: {describe(r)}"
        assert code in problems(r)
        tag = "[repaired]" if repairable else "[NOT repaired]"
        assert tag in r.stdout, f"{code} should be marked {tag}: {r.stdout}"
        r2 = fsck(self.m, "--verify-data")
        if repairable:
            assert r2.returncode == 0, f"second fsck after --repair is not clean: {describe(r2)}"
            assert "(clean)" in r2.stdout
        else:
            assert r2.returncode == 1 and code in problems(r2), \
                f"{code} cannot be repaired and must still be reported: {describe(r2)}"
        return r

    def serves(self, keep, gone=()):
        """Mounts and checks that `keep` read back exactly and `gone` are gone."""
        self.m.start()
        try:
            for n in keep:
                pool, data = self.content[n]
                assert read_page(self.m.path(*pool, n)) == data, f"{n} changed after repair"
            for n in gone:
                pool, _ = self.content[n]
                assert not os.path.exists(self.m.path(*pool, n)), f"{n} should be dropped"
        finally:
            self.m.umount()


@pytest.fixture
def pages(mount):
    return Pages(mount)


def pid_of(m, name):
    return rows(m, "SELECT id FROM pages WHERE name=?", name.encode())[0][0]


def test_owner_missing_is_reported_and_the_mark_is_written_again(pages):
    owner = pages.m.backing / ".pagefs-owner"
    assert owner.exists()
    mark = owner.read_text()
    owner.unlink()
    pages.break_and_check("owner-missing", expect_in_msg=(".pagefs-owner",))
    assert owner.exists() and owner.read_text().split("\n")[1] == mark.split("\n")[1], \
        "the repaired owner mark should carry the index id"
    pages.serves(keep=pages.content)


def test_repair_of_a_directory_that_is_not_this_indexs_backing_is_refused(pages, tmp_path):
    """fsck --repair pointed at a directory with neither the owner mark nor
    any of the index's data files (the shared filesystem not mounted on
    it, a typo) refuses to run: it used to drop every page as data-missing
    and write its mark and empty data files there."""
    other = tmp_path / "not-mounted"
    other.mkdir()
    before = rows(pages.m, "SELECT id, name, slot FROM pages ORDER BY id")
    r = run_pagefs("fsck", other, "--meta", pages.m.meta, "--repair", timeout=120)
    assert r.returncode == 1, describe(r)
    assert "does not look like this index's backing directory" in r.stderr, describe(r)
    assert list(other.iterdir()) == [], "nothing written into it"
    assert rows(pages.m, "SELECT id, name, slot FROM pages ORDER BY id") == before
    r = run_pagefs("fsck", other, "--meta", pages.m.meta, timeout=120)
    assert r.returncode == 1 and "data-missing" in problems(r), "a check still reports"
    # another index's mark does not make the directory this index's
    mark = (pages.m.backing / ".pagefs-owner").read_text()
    (other / ".pagefs-owner").write_text(re.sub(r"index_id \S+", "index_id 0123456789abcdef", mark))
    r = run_pagefs("fsck", other, "--meta", pages.m.meta, "--repair", timeout=120)
    assert r.returncode == 1 and "does not look like" in r.stderr, describe(r)
    assert sorted(p.name for p in other.iterdir()) == [".pagefs-owner"]
    afile = tmp_path / "afile"
    afile.write_text("x")
    r = run_pagefs("fsck", afile, "--meta", pages.m.meta, timeout=120)
    assert r.returncode == 1 and "not a directory" in r.stderr, describe(r)
    pages.serves(keep=pages.content)


def test_owner_other_is_reported_and_not_repaired(pages):
    owner = pages.m.backing / ".pagefs-owner"
    text = owner.read_text()
    owner.write_text(re.sub(r"index_id \S+", "index_id 0123456789abcdef", text))
    pages.break_and_check("owner-other", expect_in_msg=("0123456789abcdef",), repairable=False)
    assert "0123456789abcdef" in owner.read_text(), "fsck must not take over another index's mark"


def test_pool_bad_drops_the_pool_and_its_pages(pages):
    edit(pages.m, "UPDATE pools SET slot_size=0 WHERE rank=1 AND ns='mamba'")
    r = pages.break_and_check("pool-bad", expect_in_msg=("1/mamba",))
    assert "page-orphan" in problems(r), "the pages of a bad pool are orphans"
    assert rows(pages.m, "SELECT count(*) FROM pools WHERE rank=1")[0][0] == 0
    assert rows(pages.m, "SELECT count(*) FROM pages WHERE name IN (X'7130', X'7131')")[0][0] == 0
    pages.serves(keep=["p0", "p1", "p2", "p3"])


def test_pool_with_an_invalid_namespace_is_bad(pages):
    edit(pages.m, "UPDATE pools SET ns='Bad/NS' WHERE rank=1")
    pages.break_and_check("pool-bad", expect_in_msg=("Bad/NS",))
    pages.serves(keep=["p0", "p1", "p2", "p3"])


def test_rank_missing_adds_the_rank_row(pages):
    edit(pages.m, "DELETE FROM ranks WHERE rank=1")
    pages.break_and_check("rank-missing", expect_in_msg=("rank 1",))
    assert rows(pages.m, "SELECT count(*) FROM ranks WHERE rank=1")[0][0] == 1
    pages.serves(keep=pages.content)


def refused_twice(pages, path, what):
    """A mount refuses the lost data file, naming it and fsck --repair, and
    changes nothing on the backing (the file stays missing, or as short),
    so that the next mount refuses too: one that made or grew the file
    served the lost pages as zeros."""
    size = os.path.getsize(path) if os.path.exists(path) else None
    for attempt in (1, 2):
        r = pages.m.attempt()
        assert r.returncode == 1, f"mount {attempt} must refuse a data file that {what}: {describe(r)}"
        assert path in r.stderr and "fsck --repair" in r.stderr, describe(r)
        now = os.path.getsize(path) if os.path.exists(path) else None
        assert now == size, f"the refused mount {attempt} changed {path}: {size} -> {now} bytes"


def test_data_missing_drops_the_pools_pages_and_creates_the_file(pages):
    path = pages.data_file("q0")
    os.unlink(path)
    refused_twice(pages, path, "is missing")
    pages.break_and_check("data-missing", expect_in_msg=(path,))
    assert os.path.getsize(path) == CAP * SLOT, "the repaired data file should cover the capacity"
    assert rows(pages.m, "SELECT count(*) FROM pages WHERE name IN (X'7130', X'7131')")[0][0] == 0
    pages.serves(keep=["p0", "p1", "p2", "p3"], gone=["q0", "q1"])


def test_data_short_drops_pages_past_the_end_and_grows_the_file(pages):
    path, off, slot = pages.where["p3"]
    cut = max(o + len(pages.content[n][1]) for n, (p, o, s) in pages.where.items()
              if p == path and n != "p3" and o < off)
    assert cut <= off
    os.truncate(path, off + 10)  # p3 (length > 10) now lies past the end
    refused_twice(pages, path, "lost the end of a page")
    pages.break_and_check("data-short", expect_in_msg=("p3", path))
    assert os.path.getsize(path) == CAP * SLOT
    pages.serves(keep=["p0", "p1", "p2", "q0", "q1"], gone=["p3"])


def test_page_orphan_is_dropped(pages):
    edit(pages.m, ("UPDATE pages SET pool=4242 WHERE id=?", (pid_of(pages.m, "p1"),)))
    pages.break_and_check("page-orphan", expect_in_msg=("p1", "4242"))
    pages.serves(keep=["p0", "p2", "p3", "q0", "q1"], gone=["p1"])


def test_page_slot_beyond_capacity_is_dropped(pages):
    edit(pages.m, ("UPDATE pages SET slot=? WHERE id=?", (CAP + 3, pid_of(pages.m, "p2"))))
    pages.break_and_check("page-slot-range", expect_in_msg=("p2", f"slot {CAP + 3}"))
    pages.serves(keep=["p0", "p1", "p3", "q0", "q1"], gone=["p2"])


def test_page_longer_than_its_slot_is_dropped(pages):
    edit(pages.m, ("UPDATE pages SET length=? WHERE id=?", (SLOT + 1, pid_of(pages.m, "p0"))))
    pages.break_and_check("page-length", expect_in_msg=("p0", str(SLOT + 1)))
    pages.serves(keep=["p1", "p2", "p3", "q0", "q1"], gone=["p0"])


@pytest.mark.parametrize("bad", [b"a/b", b".", b"..", b"x\0y", b"", b"n" * 256],
                         ids=["slash", "dot", "dotdot", "nul", "empty", "256bytes"])
def test_page_with_an_invalid_name_is_dropped(pages, bad):
    edit(pages.m, ("UPDATE pages SET name=? WHERE id=?", (bad, pid_of(pages.m, "p3"))))
    r = pages.m.attempt()
    assert r.returncode == 1 and "pagefs fsck" in r.stdout + r.stderr, \
        f"mount must refuse an index with an invalid page name, naming fsck: {describe(r)}"
    pages.break_and_check("page-name")
    pages.serves(keep=["p0", "p1", "p2", "q0", "q1"], gone=["p3"])


def test_page_with_an_id_past_48_bits_is_dropped(pages):
    """Pages keep 48 bits of their id, as inode numbers do: a row past that
    (none can be made) is refused at mount, and fsck names and drops it."""
    edit(pages.m, ("UPDATE pages SET id=? WHERE id=?", (1 << 48, pid_of(pages.m, "p1"))))
    r = pages.m.attempt()
    assert r.returncode == 1 and "pagefs fsck" in r.stdout + r.stderr, \
        f"mount must refuse an index with a page id past 48 bits, naming fsck: {describe(r)}"
    pages.break_and_check("page-id", expect_in_msg=("p1", str(1 << 48)))
    pages.serves(keep=["p0", "p2", "p3", "q0", "q1"], gone=["p1"])


def _drop_unique_slot(m):
    """Makes sure the pages table has no UNIQUE(pool, slot), as schema 3 (a
    new index) has it, so two rows can name one slot: rebuilds an older
    table without it."""
    (sql,) = rows(m, "SELECT sql FROM sqlite_master WHERE name='pages'")[0]
    if "UNIQUE(pool, slot)" not in sql:
        return
    edit(m, sql.replace("pages(", "pages_new(", 1).replace(", UNIQUE(pool, slot)", ""),
         "INSERT INTO pages_new SELECT * FROM pages", "DROP TABLE pages",
         "ALTER TABLE pages_new RENAME TO pages")


def test_slot_shared_keeps_the_page_whose_bytes_match(pages):
    m = pages.m
    _drop_unique_slot(m)
    slot0 = pages.where["p0"][2]
    edit(m, ("UPDATE pages SET slot=? WHERE id=?", (slot0, pid_of(m, "p1"))))
    r = pages.break_and_check("slot-shared", expect_in_msg=(f"slot {slot0}",))
    msgs = problems(r)["slot-shared"]
    assert len(msgs) == 1 and "'p1'" in msgs[0], f"only p1 (bytes do not match) goes: {msgs}"
    pages.serves(keep=["p0", "p2", "p3", "q0", "q1"], gone=["p1"])


def test_slot_shared_by_two_copies_of_one_page_drops_both(pages):
    m = pages.m
    _drop_unique_slot(m)
    edit(m, "INSERT INTO pages(id,pool,name,slot,length,checksum,mtime,atime,gen)"
            " SELECT id+1000,pool,X'70305f636f7079',slot,length,checksum,mtime,atime,gen"
            " FROM pages WHERE name=X'7030'")
    r = pages.break_and_check("slot-shared")
    assert len(problems(r)["slot-shared"]) == 2, "neither copy can be trusted: both go"
    pages.serves(keep=["p1", "p2", "p3", "q0", "q1"], gone=["p0"])


def _drop_unique_name(m):
    """Makes sure the pages table has no UNIQUE(pool, name), as schema 2 (a
    new index) has it, so two rows can carry one name: rebuilds a schema 1
    table without it."""
    (sql,) = rows(m, "SELECT sql FROM sqlite_master WHERE name='pages'")[0]
    if "UNIQUE(pool, name)" not in sql:
        return
    sql = re.sub(r'^CREATE TABLE "?pages"?\(', "CREATE TABLE pages2(", sql)
    edit(m, re.sub(r",\s*UNIQUE\(pool, name\)", "", sql),
         "INSERT INTO pages2 SELECT * FROM pages", "DROP TABLE pages",
         "ALTER TABLE pages2 RENAME TO pages")


def _second_p0(pages):
    """Adds a second row named p0 to 0/kv (id + 1000), with new bytes in a
    free slot and their right checksum, so only the name is wrong. Returns
    (first id, second id, first slot, second slot, second bytes)."""
    m = pages.m
    if XXH3 is None:
        pytest.skip("no XXH3-64 (python3-xxhash or libxxhash)")
    _drop_unique_name(m)
    (pid, pool, slot0, gen), = rows(m, "SELECT id, pool, slot, gen FROM pages WHERE name=X'7030'")
    used = {s for (s,) in rows(m, "SELECT slot FROM pages WHERE pool=?", pool)}
    free = next(s for s in range(CAP) if s not in used)
    data = PF.make_page("p0", 2, 7000)
    with open(pages.data_file("p0"), "r+b") as f:
        f.seek(free * SLOT)
        f.write(data)
    cs = XXH3(data)
    edit(m, ("INSERT INTO pages(id,pool,name,slot,length,checksum,mtime,atime,gen)"
             " SELECT ?,pool,name,?,?,?,mtime,atime,? FROM pages WHERE id=?",
             (pid + 1000, free, len(data), cs - (1 << 64) if cs >= 1 << 63 else cs, gen + 1,
              pid)))
    return pid, pid + 1000, slot0, free, data


def _p0_rows(m):
    return rows(m, "SELECT id FROM pages WHERE name=X'7030' ORDER BY id")


def _serves_one_p0_at(pages, slot):
    pages.serves(keep=pages.content)
    pages.m.start()
    try:
        assert os.listdir(pages.m.pool(0, "kv")).count("p0") == 1
        assert xattr_int(pages.m.path(0, "kv", "p0"), "user.pagefs.slot") == slot
    finally:
        pages.m.umount()


@pytest.mark.parametrize("newer", [True, False], ids=["second-row-newer", "second-row-older"])
def test_name_shared_keeps_the_row_with_the_highest_id(pages, newer):
    m = pages.m
    pid, other, slot0, free, data = _second_p0(pages)
    keep, drop, slot = other, pid, free
    if newer:
        pages.content["p0"] = (pages.content["p0"][0], data)
    else:  # the first row gets the higher id
        keep, drop, slot = pid + 2000, other, slot0
        edit(m, ("UPDATE pages SET id=? WHERE id=?", (keep, pid)))
    assert _p0_rows(m) == sorted([(keep,), (drop,)])
    r = pages.break_and_check("name-shared", expect_in_msg=(
        "'p0'", "0/kv", f"id {drop} dropped", f"id {keep} kept"), verify=True)
    found = problems(r)
    assert set(found) == {"name-shared"} and len(found["name-shared"]) == 1, \
        f"only the older row is reported, once: {found}"
    assert _p0_rows(m) == [(keep,)]
    _serves_one_p0_at(pages, slot)


def test_name_shared_older_row_on_another_pages_slot_is_only_name_shared(pages):
    """The dropped row frees its slot: the page really there is not also
    reported slot-shared, nor the dropped row a second time."""
    m = pages.m
    _drop_unique_slot(m)
    pid, other, _, free, data = _second_p0(pages)
    edit(m, ("UPDATE pages SET slot=? WHERE id=?", (pages.where["p1"][2], pid)))
    r = pages.break_and_check("name-shared", expect_in_msg=(f"id {pid} dropped",), verify=True)
    found = problems(r)
    assert set(found) == {"name-shared"} and len(found["name-shared"]) == 1, found
    assert "1 problems, 1 repaired" in r.stdout, r.stdout
    assert _p0_rows(m) == [(other,)]
    pages.content["p0"] = (pages.content["p0"][0], data)
    _serves_one_p0_at(pages, free)


def test_checksum_bad_with_verify_data_drops_the_page(pages):
    path, off, _ = pages.where["q1"]
    with open(path, "r+b") as f:
        f.seek(off + 100)
        b = f.read(1)
        f.seek(off + 100)
        f.write(bytes([b[0] ^ 0xff]))
    r = fsck(pages.m)
    assert r.returncode == 0, f"without --verify-data the bytes are not read: {describe(r)}"
    pages.break_and_check("checksum-bad", expect_in_msg=("q1",), verify=True)
    pages.serves(keep=["p0", "p1", "p2", "p3", "q0"], gone=["q1"])


def test_checksum_missing_is_computed_from_the_bytes(pages):
    m = pages.m
    want = rows(m, "SELECT checksum FROM pages WHERE name=X'7032'")[0][0]
    edit(m, "UPDATE pages SET checksum=NULL WHERE name=X'7032'")
    pages.break_and_check("checksum-missing", expect_in_msg=("p2",), verify=True)
    assert rows(m, "SELECT checksum FROM pages WHERE name=X'7032'")[0][0] == want
    pages.serves(keep=pages.content)


def test_several_problems_at_once_are_all_reported_and_repaired(pages):
    m = pages.m
    (pages.m.backing / ".pagefs-owner").unlink()
    edit(m, ("UPDATE pages SET slot=999 WHERE id=?", (pid_of(m, "p0"),)),
         ("UPDATE pages SET pool=77 WHERE id=?", (pid_of(m, "q0"),)),
         "DELETE FROM ranks WHERE rank=0")
    r = fsck(m)
    assert r.returncode == 1
    assert {"owner-missing", "page-slot-range", "page-orphan", "rank-missing"} <= set(problems(r))
    assert re.search(r"\b4 problems\b", r.stdout), r.stdout
    r = fsck(m, "--repair")
    assert "4 repaired" in r.stdout, r.stdout
    r = fsck(m, "--verify-data")
    assert r.returncode == 0, describe(r)
    pages.serves(keep=["p1", "p2", "p3", "q1"], gone=["p0", "q0"])


def test_fsck_of_a_missing_index_fails_naming_it(mount):
    m = mount(start=False)
    r = run_pagefs("fsck", m.backing, "--meta", f"sqlite:{m.dir / 'nope.db'}")
    assert r.returncode == 1 and "nope.db" in r.stderr, describe(r)


def test_fsck_refuses_while_a_daemon_holds_the_index(mount):
    m = mount("--page-size", "64K", "--capacity", "1M")
    write_page(m.pool(0, "kv") / "p", b"x")
    r = fsck(m)
    assert r.returncode == 1, f"fsck beside a running daemon must be refused: {describe(r)}"
    assert (r.stdout + r.stderr).strip()


def _serve(d, *opts, **kw):
    os.makedirs(d, exist_ok=True)
    return MC.Server(d, "--page-size", "64K", *opts, **kw)


def test_log_damaged_drops_the_record_and_keeps_the_other_pages(tmp_root):
    """The key protocol's confirms are page log records of up to 64 pages
    (sqlite_log.h): one that does not decode stops the daemon from
    starting, naming fsck, and --repair drops that record alone."""
    d = os.path.join(tmp_root, "log-damaged")
    s = _serve(d)
    keys = [f"k{i}" for i in range(600)]
    try:
        s.client.initialize(0, 1024)
        got = s.client.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
        s.client.confirm_write(0, [[k, slot] for k, (_, slot) in zip(keys, got)], [])
    finally:
        assert s.stop() == 0, s.log_text()
    index = s.meta.split(":", 1)[1]
    c = sqlite3.connect(index)
    try:
        (seq, lo, n), = c.execute("SELECT seq, lo, n FROM page_log ORDER BY seq DESC LIMIT 1")
        assert c.execute("SELECT total(n) FROM page_log").fetchone()[0] == 600
        body = bytearray(c.execute("SELECT body FROM page_log WHERE seq=?", (seq,)).fetchone()[0])
        body[len(body) // 2] ^= 0x20
        c.execute("UPDATE page_log SET body=? WHERE seq=?", (bytes(body), seq))
        c.commit()
    finally:
        c.close()
    m = type("M", (), {"backing": s.backing, "meta": s.meta})
    with pytest.raises(AssertionError) as e:
        _serve(os.path.join(d, "refused"), backing=s.backing, meta=s.meta)
    assert f"page log record {seq} is damaged" in str(e.value) and "fsck --repair" in str(e.value)
    r = fsck(m)
    assert r.returncode == 1 and f"page log record {seq}" in problems(r)["log-damaged"][0], \
        describe(r)
    r = fsck(m, "--repair")
    assert r.returncode == 1 and "[repaired]" in r.stdout, describe(r)
    r = fsck(m)
    assert r.returncode == 0 and "(clean)" in r.stdout, describe(r)
    s = _serve(os.path.join(d, "after"), backing=s.backing, meta=s.meta)
    try:
        s.client.initialize(0, 1024)
        found = s.client.get_page_indices(0, keys)
        lost = [k for k, v in zip(keys, found) if v is None]
        assert len(lost) == n and lost == keys[600 - n:], (n, lost[:5])
        assert [v for v in found[: 600 - n]] == [slot for _, slot in got[: 600 - n]]
        more = s.client.reserve_and_allocate_page_indices(0, [[f"n{i}", ""] for i in range(424 + n)])
        assert all(slot >= 0 for _, slot in more), "the lost pages' slots are free again"
    finally:
        assert s.stop() == 0, s.log_text()
