"""The compiled core: the modules ``minibroker/corebuild.py`` names, compiled by mypyc.

The project's metadata is in ``pyproject.toml``; this file adds the C extensions
only when asked (``MINIBROKER_COMPILE=1``), so a plain ``pip install`` needs no
C compiler and installs the interpreted broker. ``make compiled`` runs::

    MINIBROKER_COMPILE=1 python setup.py build_ext --inplace -j 2

which puts each extension beside its source (``*.so`` is ignored by git) and
writes ``minibroker/compiled.json``: the compiler, the Python, and each source's
SHA-256 as it was compiled. At import, ``minibroker.corebuild`` compares those
digests with the sources and loads the sources when one differs (a stale build
never runs in place of an edited source)."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from typing import Any

from setuptools import setup
from setuptools.command.build_ext import build_ext

ROOT = Path(__file__).resolve().parent


def _corebuild() -> Any:
    """``minibroker/corebuild.py``, loaded by path (importing ``minibroker`` would load the core)."""
    spec = importlib.util.spec_from_file_location("_minibroker_corebuild", ROOT / "minibroker" / "corebuild.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up
    spec.loader.exec_module(module)
    return module


class BuildCompiledCore(build_ext):
    """build_ext that records the build (``minibroker/compiled.json``) once it is done."""

    def run(self) -> None:
        corebuild = _corebuild()
        digests = corebuild.source_digests()  # the sources as they are compiled
        super().run()
        if self.inplace:
            import mypy.version

            manifest = {
                "compiler": f"mypyc {mypy.version.__version__}",
                "python": corebuild.python_tag(),
                "sources": digests,
            }
            path = ROOT / "minibroker" / corebuild.MANIFEST_NAME
            path.write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n", encoding="utf-8")


def _extensions() -> list[Any]:
    if os.environ.get("MINIBROKER_COMPILE") != "1":
        return []
    from mypyc.build import mypycify

    corebuild = _corebuild()
    paths = [str(corebuild.source_path(module).relative_to(ROOT)) for module in corebuild.COMPILED_MODULES]
    return mypycify(paths, opt_level="3", multi_file=True, group_name="minibroker_core")


setup(ext_modules=_extensions(), cmdclass={"build_ext": BuildCompiledCore})
