"""Fixtures for the tests of the Python package (python/pagefs): the
integration suite's own (tests/integration/conftest.py: the `mount`
factory, the watchdog, daemon logs on failure), and python/ on sys.path so
`import pagefs` finds the package of this tree."""
import importlib.util
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent.parent
for p in (HERE.parent / "integration", ROOT / "python"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

_spec = importlib.util.spec_from_file_location("pagefs_it_conftest",
                                               HERE.parent / "integration" / "conftest.py")
_it = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_it)
globals().update({k: v for k, v in vars(_it).items() if not k.startswith("__")})
