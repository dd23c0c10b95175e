"""python/ is a package pip can install (pyproject with Debian's
python3-setuptools): its wheel holds every module, and the installed copy
imports without SGLang, numpy or torch."""
import os
import shutil
import subprocess
import sys
import zipfile

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_the_wheel_holds_the_package_and_imports_alone(tmp_path):
    src = tmp_path / "src"
    shutil.copytree(os.path.join(ROOT, "python"), src,
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = tmp_path / "dist"
    out.mkdir()
    build = ("import sys; from setuptools import build_meta; "
             "print(build_meta.build_wheel(sys.argv[1]))")
    r = subprocess.run([sys.executable, "-c", build, str(out)], cwd=src, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    wheel = out / r.stdout.strip().splitlines()[-1]
    names = zipfile.ZipFile(wheel).namelist()
    for mod in ("__init__", "client", "sglang", "_wire", "_buffers", "_checksum",
                "_sglang_base"):
        assert f"pagefs/{mod}.py" in names, names
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    probe = ("import sys; sys.modules['numpy'] = None; sys.modules['torch'] = None; "
             "import pagefs, pagefs.sglang; "
             "assert pagefs.__file__.startswith(sys.argv[1]), pagefs.__file__; "
             "print(issubclass(pagefs.sglang.PagefsStorage, pagefs.sglang.HiCacheStorage))")
    r = subprocess.run([sys.executable, "-S", "-c", probe, str(site)], capture_output=True,
                       text=True, timeout=60, env={"PYTHONPATH": str(site)}, cwd=tmp_path)
    assert r.returncode == 0 and r.stdout.strip() == "True", r.stderr[-3000:]
