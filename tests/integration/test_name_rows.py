"""One row per name and per slot in the SQLite index without a unique index
on either (DECISIONS.md, "The SQLite index has no index on names or
slots"): the store deletes
the row a commit, rename or key confirm replaces by the id memory knows,
so replacing pages by name, from many threads at once, leaves exactly one
row per name; indexes of schema versions 1 and 2 (which still have the
unique indexes) work as before, as do those of schema 3 (no page log:
key confirms are rows); two rows of one name or of one slot are
found at mount and the mount is refused with the fix. The daemon holds its index exclusively
(README "Decisions"), so the rows are read with the daemon stopped, and
every connection here is closed before a mount."""
import contextlib
import errno
import os
import sqlite3
import threading

import indexdb
import metaclient as MC
from pagefs_helpers import assert_bytes_equal, describe, read_page, run_pagefs, write_page

SMALL = ("--page-size", "64K", "--capacity", "8M")


def index_db(m):
    """A connection to the index of a stopped daemon, closed on leaving
    the with block (sqlite3's own context manager only commits)."""
    assert not m.mounted, "the daemon holds its index: stop it first"
    return contextlib.closing(sqlite3.connect(m.index))


def rows(m):
    with index_db(m) as db:
        return db.execute("SELECT pool, name, id, slot FROM pages").fetchall()


def twins(m):
    with index_db(m) as db:
        return db.execute("SELECT pool, name, count(*) FROM pages GROUP BY pool, name"
                          " HAVING count(*) > 1").fetchall()


def schema_version(m):
    with index_db(m) as db:
        return db.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone()


def indexes_on(m, column):
    """The indexes of the pages table that cover the column."""
    out = []
    with index_db(m) as db:
        for row in db.execute("PRAGMA index_list('pages')").fetchall():
            cols = [c[2] for c in db.execute(f"PRAGMA index_info('{row[1]}')")]
            if column in cols:
                out.append((row[1], cols))
    return out


def name_indexes(m):
    return indexes_on(m, "name")


def as_older_schema(m, version, unique):
    """Rebuilds the pages table of a stopped daemon's index as pagefs made
    it at schema `version`, with those UNIQUE constraints."""
    with index_db(m) as db:
        db.executescript(f"""
            CREATE TABLE pages_old(id INTEGER PRIMARY KEY, pool INTEGER NOT NULL,
              name BLOB NOT NULL, slot INTEGER NOT NULL, length INTEGER NOT NULL,
              checksum INTEGER, mtime INTEGER NOT NULL, atime INTEGER NOT NULL,
              gen INTEGER NOT NULL, {unique});
            INSERT INTO pages_old SELECT * FROM pages;
            DROP TABLE pages;
            ALTER TABLE pages_old RENAME TO pages;
            UPDATE settings SET value='{version}' WHERE key='schema_version';
        """)


def replace_a_lot(pool, names, rounds, seed, stale=None):
    """Creates, overwrites (O_TRUNC) and renames over the given names. An
    open(O_TRUNC) may get ESTALE when the name was replaced twice between
    the kernel's lookups (README "ESTALE under churn"): counted in
    stale[0] and tried again, as a client would."""
    last = {}
    for i in range(rounds):
        name = names[(i * 7 + seed) % len(names)]
        data = os.urandom(1000 + (i * 37 + seed) % 5000)
        kind = i % 3
        if kind == 0:  # a new file over the name: the temp-and-rename pattern
            tmp = pool / f".tmp-{seed}-{i}"
            write_page(tmp, data)
            os.rename(tmp, pool / name)
        else:  # open(O_TRUNC) of the existing page, or a create if it is gone
            for attempt in range(3):
                try:
                    write_page(pool / name, data)
                    break
                except OSError as e:
                    if e.errno != errno.ESTALE or stale is None or attempt == 2:
                        raise
                    stale[0] += 1
        last[name] = data
    return last


def test_a_new_index_keeps_one_row_per_name_through_replacements(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    names = [f"page-{i}" for i in range(6)]
    last = replace_a_lot(pool, names, 60, 0)
    for name, data in last.items():
        assert_bytes_equal(read_page(pool / name), data, name)
    listing = sorted(os.listdir(pool))
    m.umount()
    assert schema_version(m) == ("4",)
    assert name_indexes(m) == [], "schema 4 has no index on (pool, name)"
    assert indexes_on(m, "slot") == [], "schema 4 has no index on (pool, slot)"
    assert len({(r[0], r[3]) for r in rows(m)}) == len(rows(m)), "two rows on one slot"
    assert twins(m) == [], f"two rows of one name: {twins(m)}"
    assert sorted(r[1].decode() for r in rows(m)) == listing


def test_concurrent_replacements_of_the_same_names_leave_one_row_each(mount):
    """Threads replacing the same few names at once share journal
    transactions, so one transaction often names a page twice."""
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    names = [f"hot-{i}" for i in range(3)]
    errors = []
    stale = [0]

    def worker(seed):
        try:
            replace_a_lot(pool, names, 40, seed, stale)
        except OSError as e:
            errors.append(f"worker {seed}: {e}")

    ts = [threading.Thread(target=worker, args=(s,)) for s in range(6)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert not errors, errors[:3]
    assert stale[0] <= 12, f"ESTALE on {stale[0]} of 160 O_TRUNC opens: not rare"
    listing = sorted(os.listdir(pool))
    assert listing == names
    data = {n: read_page(pool / n) for n in names}
    m.umount()
    assert twins(m) == [], f"two rows of one name: {twins(m)}"
    m.start()  # the load would refuse two rows of one name
    assert sorted(os.listdir(pool)) == listing
    for n in names:
        assert_bytes_equal(read_page(pool / n), data[n], f"{n} after the remount")


def test_an_index_of_schema_1_with_its_unique_index_still_works(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", os.urandom(3000))
    m.umount()
    as_older_schema(m, 1, "UNIQUE(pool, name), UNIQUE(pool, slot)")
    assert name_indexes(m) != [], "the schema 1 table has its (pool, name) index"
    m.start()
    # With the unique index still there, a replacement whose old row the
    # store failed to delete would fail its insert (EIO at close).
    last = replace_a_lot(pool, ["a", "b", "c"], 30, 1)
    for name, data in last.items():
        assert_bytes_equal(read_page(pool / name), data, name)
    m.umount()
    assert twins(m) == []
    assert schema_version(m) == ("1",), "an old index is used as it is"


def test_two_rows_of_one_name_refuse_the_mount_and_name_the_fix(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "twin", os.urandom(2000))
    m.umount()
    with index_db(m) as db:
        db.execute("INSERT INTO pages(id, pool, name, slot, length, checksum, mtime, atime,"
                   " gen) SELECT id + 1000, pool, name, slot + 1, length, checksum, mtime,"
                   " atime, gen FROM pages")
        db.commit()
    r = m.attempt()
    assert r.returncode != 0, f"a mount over two rows named 'twin' succeeded: {describe(r)}"
    err = r.stderr + m.log.read_text(errors="replace") if m.log.exists() else r.stderr
    assert "twin" in err and "fsck --repair" in err, \
        f"the error should name the page and the fix: {describe(r)}"
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--repair", timeout=120)
    assert "name-shared" in r.stdout + r.stderr, f"fsck --repair: {describe(r)}"
    m.start()
    assert os.listdir(pool) == ["twin"]


def test_an_index_of_schema_2_with_its_unique_slot_index_still_works(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "a", os.urandom(3000))
    m.umount()
    as_older_schema(m, 2, "UNIQUE(pool, slot)")
    assert indexes_on(m, "slot") != [], "the schema 2 table has its (pool, slot) index"
    m.start()
    # With the unique index still there, a page put on a slot another row
    # still names would fail its insert (EIO at close).
    last = replace_a_lot(pool, ["a", "b", "c", "d"], 40, 2)
    for name, data in last.items():
        assert_bytes_equal(read_page(pool / name), data, name)
    m.umount()
    assert twins(m) == []
    assert schema_version(m) == ("2",), "an old index is used as it is"
    assert indexes_on(m, "slot") != []


def test_two_rows_on_one_slot_refuse_the_mount_and_name_the_fix(mount):
    m = mount(*SMALL)
    pool = m.pool(0, "kv")
    write_page(pool / "first", os.urandom(2000))
    m.umount()
    with index_db(m) as db:
        db.execute("INSERT INTO pages(id, pool, name, slot, length, checksum, mtime, atime,"
                   " gen) SELECT id + 1000, pool, X'7365636f6e64', slot, length, checksum,"
                   " mtime, atime, gen FROM pages")  # 'second', on first's slot
        db.commit()
    r = m.attempt()
    assert r.returncode != 0, f"a mount over two rows on one slot succeeded: {describe(r)}"
    err = r.stderr + m.log.read_text(errors="replace") if m.log.exists() else r.stderr
    assert "shares its slot" in err and "fsck --repair" in err, \
        f"the error should say what is wrong and name the fix: {describe(r)}"
    r = run_pagefs("fsck", m.backing, "--meta", m.meta, "--repair", timeout=120)
    assert "slot-shared" in r.stdout + r.stderr, f"fsck --repair: {describe(r)}"
    m.start()
    # both rows have the same bytes and checksum: neither can be trusted
    assert os.listdir(pool) == [], "fsck keeps no page of a slot two rows claim alike"


def confirm(s, keys):
    got = s.client.reserve_and_allocate_page_indices(0, [[k, ""] for k in keys])
    s.client.confirm_write(0, [[k, slot] for k, (_, slot) in zip(keys, got)], [])
    return [slot for _, slot in got]


def test_key_confirms_are_page_log_blobs_and_a_schema_3_index_keeps_rows(tmp_root):
    """Schema 4 writes a confirm's keys as page log blobs of up to 64
    consecutive ids (sqlite_log.h), not rows; an index of schema 3 (no
    page_log table) is used as it is and gets rows."""
    d = os.path.join(tmp_root, "schema-3")
    os.makedirs(d)
    s = MC.Server(d, "--page-size", "64K")
    try:
        s.client.initialize(0, 2048)
        first = confirm(s, [f"a{i}" for i in range(600)])
    finally:
        assert s.stop() == 0, s.log_text()
    index = s.meta.split(":", 1)[1]
    with contextlib.closing(sqlite3.connect(index)) as db:
        assert db.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone() \
            == ("4",)
        assert db.execute("SELECT count(*) FROM pages").fetchone() == (0,)
        assert db.execute("SELECT span, n FROM page_log ORDER BY lo").fetchall() == \
            [(64, 64)] * 9 + [(24, 24)]
        db.executescript("""
            CREATE TABLE pages_log AS SELECT * FROM page_log;  -- (checked below)
            DROP TABLE page_log;
            UPDATE settings SET value='3' WHERE key='schema_version';""")
    # (the blobs' pages, as a schema 3 index would hold them: rows)
    with contextlib.closing(sqlite3.connect(index)) as db:
        blobs = db.execute("SELECT pool, lo, span, body FROM pages_log").fetchall()
        for pool, lo, span, body in blobs:
            for p in indexdb.log_pages(pool, lo, span, body):
                db.execute("INSERT INTO pages VALUES(?,?,?,?,?,?,?,?,?)",
                           tuple(p[c] for c in ("id", "pool", "name", "slot", "length",
                                                "checksum", "mtime", "atime", "gen")))
        db.execute("DROP TABLE pages_log")
        db.commit()
    s = MC.Server(d, "--page-size", "64K", backing=s.backing, meta=s.meta)
    try:
        s.client.initialize(0, 2048)
        assert s.client.get_page_indices(0, [f"a{i}" for i in range(600)]) == first
        second = confirm(s, [f"b{i}" for i in range(100)])
        s.client.delete_keys(0, ["a0", "b0"])
    finally:
        assert s.stop() == 0, s.log_text()
    with contextlib.closing(sqlite3.connect(index)) as db:
        assert db.execute("SELECT value FROM settings WHERE key='schema_version'").fetchone() \
            == ("3",), "an old index is used as it is"
        assert not db.execute("SELECT 1 FROM sqlite_master WHERE name='page_log'").fetchone()
        assert db.execute("SELECT count(*) FROM pages").fetchone() == (698,)
    s = MC.Server(d, "--page-size", "64K", backing=s.backing, meta=s.meta)
    try:
        s.client.initialize(0, 2048)
        assert s.client.get_page_indices(0, ["a0", "a1", "b0", "b1"]) == \
            [None, first[1], None, second[1]]
    finally:
        assert s.stop() == 0, s.log_text()
