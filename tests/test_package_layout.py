"""The packages' layout: module names that cannot shadow the standard library."""

from __future__ import annotations

import ast
import functools
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def test_storage_modules_do_not_shadow_the_standard_library() -> None:
    # storage/bench_journal.py runs by path too, which puts storage/ first on
    # sys.path: a storage module named like a standard one would be imported
    # in its place by anything (argparse imports ``inspect``, for one).
    shadowing = sorted(p.name for p in (ROOT / "storage").glob("*.py") if p.stem in sys.stdlib_module_names)
    assert shadowing == []


# -- the direction of imports: clients -> minibroker -> storage --------------------------

PACKAGES = ("clients", "minibroker", "storage")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere in it (under TYPE_CHECKING or in a
    function too), relative imports resolved; ``from p import name`` gives
    ``p.name`` as well as ``p``, for ``name`` may be a module."""
    module = _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def _sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _top(name: str) -> str:
    return name.partition(".")[0]


def test_imports_run_one_way_clients_minibroker_storage() -> None:
    allowed = {"storage": set(), "minibroker": {"storage"}, "clients": {"minibroker", "storage"}}
    against = []
    for package in PACKAGES:
        for path in _sources(package):
            for name in _imports(path):
                top = _top(name)
                if top in PACKAGES and top != package and top not in allowed[package]:
                    against.append(f"{path.relative_to(ROOT)} imports {name}")
    assert against == []


def test_pyspark_is_imported_only_under_clients_spark() -> None:
    spark = ROOT / "clients" / "spark"
    outside = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in _sources(package)
        if spark not in path.parents and any(_top(n) == "pyspark" for n in _imports(path))
    ]
    assert outside == []


# -- the floors of minibroker: each subpackage imports only those above it -------------------

#: minibroker's floors, top first. A module imports (at run time) only modules of its own floor
#: or of a floor above; the top floor (a handful of modules and the ``config`` package) is the
#: vocabulary every floor shares, and the package's ``__init__`` (its public names) stands
#: below them all.
FLOORS = (
    ("config", "corebuild", "digits", "errors", "eventloop", "frames", "wildcards"),
    ("selector", "trace"),
    ("protocol",),
    ("durability",),
    ("connection",),
    ("destinations",),
    ("ops",),
    ("core",),
    ("edge",),
)


def _floor(module: str) -> int | None:
    parts = module.split(".")
    if parts[0] != "minibroker" or len(parts) < 2:
        return None
    return next((i for i, names in enumerate(FLOORS) if parts[1] in names), None)


def _runtime_imports(path: Path, module: str | None = None) -> set[str]:
    """What ``path`` imports when it runs: every import but those under ``if TYPE_CHECKING:``
    (an annotation may name a class of a floor below; nothing of it runs)."""
    tree = ast.parse(path.read_text(), str(path))
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    module = module or _module_name(path)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")[: len(package.split(".")) - max(node.level - 1, 0)] if node.level else []
            source = ".".join(base + ([node.module] if node.module else [])) if node.level else node.module or ""
            found.add(source)
            found.update(f"{source}.{alias.name}" for alias in node.names)
    return found


def test_minibrokers_floors_import_only_upward() -> None:
    against = []
    for path in _sources("minibroker"):
        module = _module_name(path)
        mine = _floor(module)
        if mine is None:  # minibroker/__init__.py: the public names, from every floor
            continue
        for name in _runtime_imports(path):
            theirs = _floor(name)
            if theirs is not None and theirs > mine:
                against.append(f"{path.relative_to(ROOT)} imports {name}")
    assert against == []


#: The packages among the top floor's names: the configuration, split by job.
TOP_PACKAGES = ("config",)


def test_minibroker_holds_subpackages_and_a_handful_of_modules() -> None:
    top = sorted(p.stem for p in (ROOT / "minibroker").glob("*.py") if p.stem != "__init__")
    assert top == sorted(set(FLOORS[0]) - set(TOP_PACKAGES))
    subpackages = sorted(p.parent.name for p in (ROOT / "minibroker").glob("*/__init__.py"))
    assert subpackages == sorted([*TOP_PACKAGES, *(name for floor in FLOORS[1:] for name in floor)])


def test_every_subpackage_declares_its_public_names() -> None:
    import importlib

    for name in [*TOP_PACKAGES, *(name for floor in FLOORS[1:] for name in floor)]:
        package = importlib.import_module(f"minibroker.{name}")
        assert package.__doc__, name
        assert isinstance(getattr(package, "__all__", None), list), name
        assert all(hasattr(package, public) for public in package.__all__), name
    import minibroker

    assert {"Broker", "BrokerConfig", "Frame", "FrameParser", "encode", "VirtualNetwork"} <= set(minibroker.__all__)


def test_importing_minibroker_loads_only_the_build_decision_until_a_name_is_used() -> None:
    """``import minibroker`` decides the core's build and nothing more: the core, the edge
    and the configuration are imported when one of the public names is first used."""
    script = (
        "import sys, minibroker\n"
        "before = sorted(m for m in sys.modules if m.startswith('minibroker.'))\n"
        "broker = minibroker.Broker\n"
        "print(before, broker.__module__, 'minibroker.edge' in sys.modules)\n"
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True, check=True)
    assert result.stdout.split(" ", 1)[1].strip() == "minibroker.core.broker False"
    assert result.stdout.startswith("['minibroker.corebuild'] ")


def test_a_name_minibroker_does_not_have_is_an_attribute_error() -> None:
    import minibroker

    with pytest.raises(AttributeError, match="no attribute 'Brokr'"):
        minibroker.Brokr  # noqa: B018


def test_the_floor_check_sees_a_downward_import(tmp_path: Path) -> None:
    """The check above reads run-time imports, relative ones too, and skips type-only ones."""
    source = tmp_path / "x.py"
    source.write_text(
        "from typing import TYPE_CHECKING\nfrom ..core import Broker\n"
        "if TYPE_CHECKING:\n    from minibroker.edge import serve\n"
    )
    found = _runtime_imports(source, "minibroker.ops.x")
    assert "minibroker.core.Broker" in found and not any(n.startswith("minibroker.edge") for n in found)
    assert _floor("minibroker.core.broker") > _floor("minibroker.protocol.codec")


def _any_aliases(path: Path) -> list[str]:
    """The names ``path`` binds to ``Any`` at its top level (``X = Any``, ``X: TypeAlias = Any``,
    ``typing.Any`` too): a reference typed so is checked nowhere."""

    def is_any(value: ast.expr | None) -> bool:
        return (isinstance(value, ast.Name) and value.id == "Any") or (
            isinstance(value, ast.Attribute) and value.attr == "Any"
        )

    found = []
    for node in ast.parse(path.read_text(), str(path)).body:
        if isinstance(node, ast.Assign) and is_any(node.value):
            found += [target.id for target in node.targets if isinstance(target, ast.Name)]
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and is_any(node.value):
            found.append(node.target.id)
    return found


def test_no_reference_is_an_alias_of_any() -> None:
    """Where a part names another it cannot import (the class's module imports it), the
    name is a ``Protocol`` of what it uses, or the class moved where it can be imported:
    never ``Any`` under another name, which mypy would take for anything."""
    found = [f"{path.relative_to(ROOT)}: {name}" for path in _sources("minibroker") for name in _any_aliases(path)]
    assert found == []


def test_the_alias_check_sees_an_alias_of_any(tmp_path: Path) -> None:
    source = tmp_path / "x.py"
    source.write_text(
        "import typing\nfrom typing import Any, TypeAlias\n"
        "QueueRef = Any\nTopicRef: TypeAlias = typing.Any\nTOPIC: object = None\n"
        "def f() -> None:\n    local = Any\n"
    )
    assert _any_aliases(source) == ["QueueRef", "TopicRef"]


def _project_sources() -> list[Path]:
    """Every Python file of the project: tracked, or new and not ignored."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return sorted({ROOT / name for name in listed if (ROOT / name).is_file()})


def _import_root(path: Path) -> str:
    """The dotted name of the folder Python imports ``path`` from: the first folder above it
    that is not a package. "" for ``clients/``, ``minibroker/`` and ``storage/`` (the project's
    root is on the path); a test's or a script's own folder else (pytest and ``python FILE``
    put it first on the path), where ``import sibling`` finds ``sibling.py``."""
    folder = path.parent
    while (folder / "__init__.py").is_file():
        folder = folder.parent
    return ".".join(folder.relative_to(ROOT).parts)


def _module_graph(paths: list[Path]) -> dict[str, set[str]]:
    """module -> the modules among ``paths`` it imports (not counting its own packages'
    ``__init__``, which Python runs before the module anyway). A module is named from the
    project's root (``tests.client.fake_server``); an import is looked for from the root and
    from the importing file's own import folder. What a script finds through a
    ``sys.path.insert`` of another folder (``bench/harness/``, vendored) is not followed."""
    modules = {_module_name(p): p for p in paths}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        root = _import_root(path)
        found = set()
        for imported in _imports(path):
            for candidate in (imported, f"{root}.{imported}" if root else imported):
                if candidate in modules and candidate != name and not name.startswith(candidate + "."):
                    found.add(candidate)
        graph[name] = found
    return graph


def _circles(graph: dict[str, set[str]]) -> list[set[str]]:
    """The import circles: strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


@functools.cache
def _project_graph() -> dict[str, set[str]]:
    return _module_graph(_project_sources())


def test_no_import_circle_anywhere_in_the_project() -> None:
    """No module imports, however indirectly, a module that imports it: not in ``clients/``,
    ``minibroker/`` or ``storage/``, not in the tests, the benchmarks or the labs. What must
    call back up does so through what it is given (a Protocol of its own, a callable, an
    object passed in), as the core's parts do through ``minibroker/destinations/ports.py``."""
    assert [sorted(circle) for circle in _circles(_project_graph())] == []


def test_the_project_graph_sees_every_kind_of_import() -> None:
    """The graph the test above searches holds the edges of each kind of import, so that
    finding no circle in it means something."""
    graph = _project_graph()
    # every folder of the project's code is in it
    assert {"bench", "clients", "examples", "minibroker", "storage", "tests"} <= {_top(m) for m in graph}
    assert "clients.replay.actor" in graph["clients.replay.driver"]  # relative, in a package
    assert "storage.segment" in graph["storage.journal"]  # relative, in storage/
    assert "bench.brokers" in graph["bench.compare"]  # a benchmark script's sibling, by bare name
    assert "minibroker.protocol" in graph["clients.stomp.client"]  # absolute, across packages
    assert "tests.broker_support" in graph["tests.conftest"]  # a test's sibling, by bare name
    assert "tests.client.fake_server" in graph["tests.client.test_client"]  # relative, in tests/
    # ``from clients.spark import inprocess``: the module is an edge, its own package is not
    assert "clients.spark.inprocess" in graph["clients.spark.analyze"]
    assert "clients.spark" not in graph["clients.spark.analyze"]


def test_the_circle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _circles(graph) == [{"a", "b", "c"}]


# -- the product speaks of itself ----------------------------------------------------------

#: What speaks of how the project was made rather than of the product: the numbers of
#: its source documents' files and of its issues, its work sessions, a design document
#: that is not in the repository, a machine's checkout path.
HISTORY_TALK = re.compile(
    r"\bseed ?0\d\d|\bissues? \d+\b|\bissue-\d|DESIGN\.md|/work/"
    r"|\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth) session\b",
    re.IGNORECASE,
)

#: bench/harness/ is vendored as it came.
VENDORED = ("bench/harness/",)


def test_code_docs_and_tests_speak_of_the_product_not_of_its_making() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    me = str(Path(__file__).resolve().relative_to(ROOT))
    found = []
    for name in tracked:
        if name == me or name.startswith(VENDORED) or not name.endswith((".py", ".md", ".toml", ".txt")):
            continue
        path = ROOT / name
        if not path.is_file():
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if HISTORY_TALK.search(line):
                found.append(f"{name}:{number}: {line.strip()[:100]}")
    assert found == []


# -- modules run with -m -------------------------------------------------------------------


def _runnable_modules() -> list[str]:
    """Every module with a ``__main__`` block (run as ``python -m package.module``)."""
    return sorted(
        _module_name(path)
        for package in PACKAGES
        for path in (ROOT / package).rglob("*.py")
        if "__main__" in path.read_text(encoding="utf-8")
        and path.stem not in ("__init__", "__main__")
        and re.search(r"^if __name__ == .__main__.:", path.read_text(encoding="utf-8"), re.M)
    )


def test_a_module_run_with_dash_m_is_not_imported_by_its_own_package() -> None:
    """``python -m pkg.mod`` imports ``pkg`` first; if that already imports
    ``pkg.mod``, runpy warns (``RuntimeWarning: 'pkg.mod' found in sys.modules
    ...``) and the module runs twice over. No package imports such a module."""
    modules = _runnable_modules()
    assert "clients.cli" in modules
    script = "import importlib, sys; importlib.import_module(sys.argv[1].rpartition('.')[0]); print(sys.argv[1] in sys.modules)"
    found = [
        name
        for name in modules  # each in a fresh interpreter, as ``-m`` runs it
        if subprocess.run(
            [sys.executable, "-c", script, name], capture_output=True, text=True, cwd=ROOT, check=True
        ).stdout.strip()
        == "True"
    ]
    assert found == []
