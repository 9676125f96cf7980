"""Which build of the core runs: the compiled one (mypyc) or the interpreted source.

The codec, the destinations and the core can be compiled with mypyc into C
extensions that sit beside their sources (``setup.py``, ``make compiled``); the
source stays the reference a student reads, the compiled build runs the same
code faster. This module is imported first (by ``minibroker/__init__.py``),
before any module it names, and importing it decides which build every later
import loads.

How it decides:

- ``MINIBROKER_CORE`` asks for a build: ``compiled``, ``interpreted`` or unset
  (the compiled build where it is usable, else the interpreted one);
- the compiled build is usable when its manifest (``minibroker/compiled.json``,
  written by the build) names this Python and every compiled module's source
  still has the SHA-256 it had when it was compiled;
- otherwise (not built, asked for the source, or a source edited since the
  build) a finder at the head of ``sys.meta_path`` loads each compiled module
  from its ``.py``: a stale extension never runs in place of an edited source,
  and ``describe()`` says why the core runs interpreted (``interpreted_reason``):
  a build under way in the background (``make run`` records its process in
  ``build/compiling.pid``), no build and how to make one, or a stale build.

A compiled build that was asked for and could not be used is not an error here
(the source runs); ``serve`` refuses to start on it and the test suite fails
(``requested_but_missing``)."""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import shutil
import sys
import sysconfig
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

__all__ = [
    "COMPILED_MODULES",
    "CORE_ENV",
    "GROUP_MODULE",
    "MANIFEST_NAME",
    "NOT_COMPILED",
    "COMPILING_PID",
    "REBUILD",
    "CoreBuild",
    "SourceFirst",
    "c_compiler_found",
    "check_build",
    "current",
    "describe",
    "extension_path",
    "group_path",
    "interpreted_reason",
    "load_group",
    "loaded_as_extension",
    "python_tag",
    "requested_but_missing",
    "select",
    "source_digests",
    "source_path",
]

#: The environment variable that asks for a build: "compiled" or "interpreted".
CORE_ENV = "MINIBROKER_CORE"
#: The build's record, beside this file: the compiler, the Python, each source's digest.
MANIFEST_NAME = "compiled.json"
#: Why the core runs interpreted when nothing was compiled.
NOT_COMPILED = "not compiled"
#: What a build found unusable asks for (the end of ``check_build``'s reasons).
REBUILD = "rebuild with `make compiled`"
#: The process of a compile under way in the background (``make run``), under the project's root.
COMPILING_PID = Path("build") / "compiling.pid"

#: The modules mypyc compiles, in one group (they call each other natively).
COMPILED_MODULES: tuple[str, ...] = (
    "minibroker.digits",
    "minibroker.frames",
    "minibroker.wildcards",
    "minibroker.protocol.codec",
    "minibroker.protocol.dialects",
    "minibroker.protocol.headers",
    "minibroker.protocol.message",
    "minibroker.connection.clock",
    "minibroker.connection.logins",
    "minibroker.connection.outlet",
    "minibroker.connection.security",
    "minibroker.connection.session",
    "minibroker.connection.states",
    "minibroker.connection.timers",
    "minibroker.destinations.cursor",
    "minibroker.destinations.destination",
    "minibroker.destinations.durables",
    "minibroker.destinations.paged",
    "minibroker.destinations.pending",
    "minibroker.destinations.ports",
    "minibroker.destinations.queue",
    "minibroker.destinations.registry",
    "minibroker.destinations.seqfifo",
    "minibroker.destinations.subscription",
    "minibroker.destinations.topic",
    "minibroker.destinations.usage",
    "minibroker.core.actions",
    "minibroker.core.broker",
    "minibroker.core.common",
    "minibroker.core.context",
    "minibroker.core.flow",
    "minibroker.core.handlers",
    "minibroker.core.handshake",
    "minibroker.core.hooks",
    "minibroker.core.invariants",
    "minibroker.core.limits",
    "minibroker.core.outbox",
    "minibroker.core.reading",
    "minibroker.core.recovery",
    "minibroker.core.routing",
    "minibroker.core.sampling",
    "minibroker.core.storehooks",
    "minibroker.core.teardown",
    "minibroker.core.tools",
    "minibroker.core.transactions",
)

_PACKAGE_DIR = Path(__file__).resolve().parent
_ROOT = _PACKAGE_DIR.parent

#: The compiled group's shared library (mypyc's runtime and the modules' code, which each
#: module's own extension imports by this name); the build leaves it at the project's root.
GROUP_MODULE = "minibroker_core__mypyc"


def group_path(root: Path = _ROOT) -> Path | None:
    """The group's shared library under ``root``, if it was built for this Python."""
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = root / f"{GROUP_MODULE}{suffix}"
        if candidate.exists():
            return candidate
    return None


def load_group(root: Path = _ROOT) -> None:
    """Load the group's library from ``root`` under its name, so that the compiled modules
    find it wherever the broker runs from (the project's root need not be on ``sys.path``:
    an editable install maps the packages only)."""
    if GROUP_MODULE in sys.modules:
        return
    path = group_path(root)
    spec = importlib.util.spec_from_file_location(GROUP_MODULE, path) if path is not None else None
    if spec is None or spec.loader is None:
        raise ImportError(f"the compiled core's {GROUP_MODULE} is not in {root}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[GROUP_MODULE] = module
    spec.loader.exec_module(module)


@dataclass(frozen=True)
class CoreBuild:
    """The build in use: ``name`` is "compiled" or "interpreted"; ``compiler``
    names the compiler of a compiled build ("mypyc 1.x"); ``reason`` says why an
    interpreted build runs (asked for, none built, a build under way or one unusable)."""

    name: str
    compiler: str = ""
    reason: str = ""
    requested: str = ""

    def describe(self) -> str:
        """The first log line's words: "core: compiled (mypyc 1.x)" or "core: interpreted (why)"."""
        if self.name == "compiled":
            return f"core: compiled ({self.compiler})"
        return f"core: interpreted ({self.reason})" if self.reason else "core: interpreted"


def source_path(module: str, root: Path = _ROOT) -> Path:
    """The ``.py`` file of a compiled module (``root`` holds its top package)."""
    return root.joinpath(*module.split(".")).with_suffix(".py")


def source_digests(modules: Sequence[str] = COMPILED_MODULES, root: Path = _ROOT) -> dict[str, str]:
    """Each module's source SHA-256, as the build records it and the check compares it."""
    return {module: hashlib.sha256(source_path(module, root).read_bytes()).hexdigest() for module in modules}


def python_tag() -> str:
    """The extension suffix of this interpreter (the build is valid for it only)."""
    return importlib.machinery.EXTENSION_SUFFIXES[0]


def extension_path(module: str, root: Path = _ROOT) -> Path | None:
    """The compiled extension beside a module's source, if there is one."""
    base = source_path(module, root)
    for suffix in importlib.machinery.EXTENSION_SUFFIXES:
        candidate = base.with_name(base.stem + suffix)
        if candidate.exists():
            return candidate
    return None


def check_build(modules: Sequence[str], root: Path, manifest_path: Path) -> tuple[str, str]:
    """(the compiler, "") when the extensions of ``modules`` under ``root`` may run,
    else ("", why not): none built, no manifest, another Python, one missing, or a
    source whose digest is not the one ``manifest_path`` recorded (stale)."""
    if not any(extension_path(module, root) for module in modules):
        return "", NOT_COMPILED
    try:
        manifest = json.loads(manifest_path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "", f"compiled modules without a readable {manifest_path.name}: {REBUILD}"
    if manifest.get("python") != python_tag():
        return "", f"compiled for {manifest.get('python')}, not this Python: {REBUILD}"
    if group_path(root) is None:
        return "", f"compiled modules without {GROUP_MODULE}: {REBUILD}"
    recorded = manifest.get("sources", {})
    missing = [module for module in modules if extension_path(module, root) is None or module not in recorded]
    if missing:
        return "", f"not compiled: {', '.join(missing)}: {REBUILD}"
    changed = [module for module, digest in source_digests(modules, root).items() if recorded.get(module) != digest]
    if changed:
        return "", f"stale, source edited since the build: {', '.join(changed)}: {REBUILD}"
    return str(manifest.get("compiler", "mypyc")), ""


def _compiling(root: Path) -> bool:
    """Whether a compile of the core runs in the background: the process ``make run``
    recorded in ``root/COMPILING_PID`` is alive (a stale record of a build that ended
    or was killed is ignored)."""
    try:
        pid = int((root / COMPILING_PID).read_text(encoding="ascii").strip())
    except (OSError, ValueError):
        return False
    if pid <= 0:  # not a process (0 and below name process groups)
        return False
    try:
        os.kill(pid, 0)  # no signal: only whether it exists
    except PermissionError:
        return True  # alive, another user's
    except OSError:
        return False
    return True


def c_compiler_found() -> bool:
    """Whether this machine can compile the core: a C compiler and this Python's headers."""
    return shutil.which("cc") is not None and (Path(sysconfig.get_paths()["include"]) / "Python.h").exists()


def interpreted_reason(why_not: str, root: Path = _ROOT, compiler: Callable[[], bool] = c_compiler_found) -> str:
    """Why the core runs interpreted where no usable build exists (``why_not``, from
    ``check_build``), in the first log line's words:

    - a compile under way (``make run`` started it): the next start runs compiled;
    - no build in a checkout: how to make one, or that this machine has no compiler;
    - no build in an installed package: it was installed without one;
    - a build that cannot be used (stale, another Python ...): ``why_not`` itself."""
    if _compiling(root):
        before = "not compiled yet" if why_not == NOT_COMPILED else why_not.removesuffix(f": {REBUILD}")
        log = COMPILING_PID.parent / "compile.log"
        return f"{before}: compiling in the background (log in {log}), the next start runs it"
    if why_not != NOT_COMPILED:
        return why_not
    if not (root / "setup.py").exists():
        return "no compiled build in this installation"
    if not compiler():
        return "no compiled build, and no C compiler or Python headers here to make one"
    return "no compiled build: `make compiled` makes one"


class SourceFirst(importlib.abc.MetaPathFinder):
    """Loads ``modules`` from their sources, ahead of the extensions beside them
    (at the head of ``sys.meta_path``)."""

    def __init__(self, modules: Sequence[str], root: Path = _ROOT) -> None:
        self.modules = frozenset(modules)
        self.root = root

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_path(fullname, self.root))


_current: CoreBuild | None = None


def select(environ: dict[str, str] | None = None) -> CoreBuild:
    """Decide the build once (the first import of ``minibroker`` calls this) and
    make later imports load it; later calls return the same decision."""
    global _current
    if _current is not None:
        return _current
    env = os.environ if environ is None else environ
    requested = env.get(CORE_ENV, "").strip().lower()
    if requested not in ("", "compiled", "interpreted"):
        requested = ""
    compiler, why_not = check_build(COMPILED_MODULES, _ROOT, _PACKAGE_DIR / MANIFEST_NAME)
    if requested == "interpreted":
        build = CoreBuild("interpreted", reason=f"{CORE_ENV}=interpreted", requested=requested)
    elif compiler:
        build = CoreBuild("compiled", compiler=compiler, requested=requested)
        load_group()
    else:
        reason = why_not if requested else interpreted_reason(why_not)
        build = CoreBuild("interpreted", reason=reason, requested=requested)
    if build.name == "interpreted" and any(extension_path(module) for module in COMPILED_MODULES):
        sys.meta_path.insert(0, SourceFirst(COMPILED_MODULES))
    _current = build
    return build


def current() -> CoreBuild:
    """The build in use (deciding it now if nothing imported ``minibroker`` yet)."""
    return select()


def describe() -> str:
    """The build in use, in the words of the broker's first log line."""
    return current().describe()


def loaded_as_extension(module: str) -> bool:
    """Whether an imported module runs compiled (its file is an extension)."""
    imported = sys.modules.get(module)
    file = getattr(imported, "__file__", None) or ""
    return file.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def requested_but_missing() -> str:
    """Why the compiled build asked for (``MINIBROKER_CORE=compiled``) does not
    run, or "" when it runs or was not asked for."""
    build = current()
    if build.requested != "compiled":
        return ""
    if build.name != "compiled":
        reason = build.reason if build.reason not in ("", NOT_COMPILED) else f"{NOT_COMPILED}: run `make compiled`"
        return f"{CORE_ENV}=compiled, but the core runs interpreted: {reason}"
    for module in COMPILED_MODULES:
        importlib.import_module(module)
        if not loaded_as_extension(module):
            return f"{CORE_ENV}=compiled, but {module} was loaded from its source"
    return ""


select()
