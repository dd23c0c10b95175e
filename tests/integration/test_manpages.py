"""The man pages (issue 25): pagefs(8), one page per command and
mount.fuse.pagefs(8) render with `groff -ww -man` without a warning, and
name exactly the long options the command's --help names."""
import os
import re
import subprocess

import pytest

import pagefs_helpers as H

MAN = os.path.join(os.path.dirname(__file__), "..", "..", "man")
COMMANDS = ["mount", "umount", "status", "pool", "fsck", "import-json", "export-json",
            "serve-meta", "bench"]


def render(page):
    r = subprocess.run(["groff", "-ww", "-man", "-Tascii", os.path.join(MAN, page)],
                       capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, LC_ALL="C"))
    assert r.returncode == 0 and not r.stderr.strip(), f"{page}: groff says:\n{r.stderr}"
    return re.sub(r".\x08", "", r.stdout)  # overstrike (bold, underline) to plain text


def longs(text):
    return set(re.findall(r"(?<![\w-])--([a-z][a-z-]*[a-z])", text))


def test_every_page_renders_without_a_groff_warning():
    pages = sorted(p for p in os.listdir(MAN) if p.endswith(".8"))
    assert set(pages) >= {"pagefs.8", "mount.fuse.pagefs.8"} | {f"pagefs-{c}.8" for c in COMMANDS}
    for p in pages:
        assert "NAME" in render(p)


@pytest.mark.parametrize("cmd", COMMANDS)
def test_a_command_page_names_the_options_its_help_names(cmd):
    helptext = H.run_pagefs(cmd, "--help").stdout
    page = render(f"pagefs-{cmd}.8")
    assert longs(helptext), helptext
    assert longs(page) == longs(helptext), (
        f"pagefs-{cmd}.8 lacks {sorted(longs(helptext) - longs(page))}, "
        f"has more: {sorted(longs(page) - longs(helptext))}")


def test_the_main_page_lists_every_command_of_the_help():
    helptext = H.run_pagefs("--help").stdout
    cmds = re.findall(r"^  ([a-z-]+) ", helptext, re.M)
    assert sorted(cmds) == sorted(COMMANDS)
    page = render("pagefs.8")
    for c in cmds:
        assert re.search(rf"^\s+{c}\b", page, re.M), f"pagefs(8) does not list {c}"
        assert f"pagefs-{c}(8)" in page


def test_the_mount_helper_page_names_the_options_of_the_helpers_usage(tmp_path):
    helper = tmp_path / "mount.fuse.pagefs"
    helper.symlink_to(os.path.abspath(H.PAGEFS_BIN))
    usage = subprocess.run([str(helper), "-h"], capture_output=True, text=True,
                           timeout=30).stdout
    assert usage.startswith("Usage: mount.fuse.pagefs"), usage
    flags = set("".join(re.findall(r"\[-([a-z]+)\]", usage))) | set(re.findall(r"\[-([a-z]) ", usage))
    assert flags >= set("sfnvrwot"), flags
    page = render("mount.fuse.pagefs.8")
    for f in flags:
        assert re.search(rf"-{f}\b", page), f"mount.fuse.pagefs(8) lacks -{f}"
