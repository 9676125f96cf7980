"""The documentation leads somewhere: its links, the files it names, the code it names.

What a reader follows from a page, checked against the tree:

- a relative link (or a backticked ``../path``) leads to a file of the
  repository, and its ``#anchor`` to a heading there;
- a repository path (``minibroker/destinations/queue.py``, ``bench/configs/spill.toml``,
  ``tests/disk_faults.PowerLossDisk``) names a file or folder that exists
  (or one git ignores on purpose, such as ``bench/results/``);
- a backticked module file (``cursor.py``) is a module of the project;
- a backticked ``module.Name`` or ``Class.method`` of the project's own code,
  and a private name or call given beside one file (a lab's "explained from
  the code"), names something that module, class or file still defines;
- ``docs/labs.md`` describes every key of ``lab.toml``, and the README stays a
  front page with every lab in its table.

Pages: the README, ``docs/``, the labs (``examples/``) and ``bench/`` but the
vendored harness, whose files stay as they came. The code's own docstrings and
comments are held to the files they name too.
"""

from __future__ import annotations

import functools
import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: the project's own code, whose names the pages may cite
CODE_PACKAGES = ("minibroker", "storage", "clients", "bench", "tests")
#: the top-level folders a repository path starts with
TOP_FOLDERS = (*CODE_PACKAGES, "examples", "docs", "console")
#: git-ignored on purpose: made by the benchmarks when they run
IGNORED = ("bench/results",)
#: ActiveMQ's classes of the same name as ours, whose Java methods the lab pages cite
JAVA_CLASSES = frozenset({"Queue", "Topic"})

_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
#: a path in backticks relative to the document (`../bench/x.md`), which a reader follows too
_PATH = re.compile(r"`(\.\.?/[^`\s]+)`")
_REPO_PATH = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w./-]*[\w/])")
_TICKED = re.compile(r"`([^`\s]+)`")
_QUALIFIED = re.compile(r"([A-Za-z_]\w*)\.([a-z_][a-z0-9_]*|[A-Z]\w*)(?:\(\))?")


def _documents() -> list[Path]:
    bench = [p for p in sorted((ROOT / "bench").rglob("*.md")) if "harness" not in p.parts]
    return [
        ROOT / "README.md",
        *sorted((ROOT / "docs").rglob("*.md")),
        *sorted((ROOT / "examples").rglob("*.md")),
        *bench,
    ]


DOCUMENTS = _documents()


def _ids(path: Path) -> str:
    return str(path.relative_to(ROOT))


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors for the headings of a markdown file."""
    slugs = set()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            slugs.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return slugs


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids)
def test_every_relative_link_leads_somewhere(doc: Path) -> None:
    text = re.sub(r"```.*?```", "", doc.read_text(encoding="utf-8"), flags=re.S)
    for target in _LINK.findall(text) + _PATH.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http:, https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (doc.parent / path).resolve() if path else doc
        assert dest.exists(), f"{doc.relative_to(ROOT)}: {target} leads nowhere"
        assert ROOT in dest.parents or dest == ROOT, f"{doc.relative_to(ROOT)}: {target} leaves the repository"
        if anchor and dest.suffix == ".md":
            assert anchor in _anchors(dest), f"{doc.relative_to(ROOT)}: no heading #{anchor} in {dest.name}"


def _repo_path_exists(named: str) -> bool:
    """``named`` is a file or folder of the tree, a module (``tests/disk_faults``), or one
    of a module's names (``tests/disk_faults.PowerLossDisk``)."""
    named = named.rstrip(".")
    if named.startswith(IGNORED) or (ROOT / named).exists():
        return True
    module, _, name = named.rpartition(".")
    if (ROOT / f"{named}.py").exists():
        return True
    return bool(name) and (ROOT / f"{module}.py").exists() and name in _defined(ROOT / f"{module}.py")


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids)
def test_every_repository_path_named_exists(doc: Path) -> None:
    missing = [
        named
        for named in _REPO_PATH.findall(doc.read_text(encoding="utf-8"))
        if "NN" not in named and not _repo_path_exists(named)  # NN: a placeholder, examples/labs/NN-name/
    ]
    assert not missing, f"{doc.relative_to(ROOT)} names what is not in the tree: {missing}"


@functools.cache
def _modules() -> dict[str, list[Path]]:
    """The project's Python files by file name (``cursor.py``) and by module name (``cursor``)."""
    found: dict[str, list[Path]] = {}
    for package in CODE_PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "harness" in path.parts or "node_modules" in path.parts:
                continue
            found.setdefault(path.name, []).append(path)
            found.setdefault(path.stem, []).append(path)
            if path.name == "__init__.py":
                found.setdefault(path.parent.name, []).append(path)
    return found


#: what binds a name in a module: a class, a function, an import, an assignment (``x =``,
#: ``x: int``, ``self.x =``), a slot; read as text, which is all a pointer's check needs, and fast
_BINDS = re.compile(
    r"^\s*(?:async\s+)?(?:class|def)\s+(\w+)"
    r"|^\s*(?:self\.)?(\w+)\s*(?::[^=\n]+)?=(?!=)"
    r"|^\s*(\w+)\s*:\s*\S"
    r"|\bimport\s+([\w., ]+)"
    r"|\bas\s+(\w+)",
    re.M,
)


@functools.cache
def _defined(path: Path) -> frozenset[str]:
    """Every name a module binds: its classes, functions, methods, attributes, imports."""
    names: set[str] = set()
    text = path.read_text(encoding="utf-8")
    for groups in _BINDS.findall(text):
        for group in groups:
            names.update(name.strip().split(".")[0] for name in group.split(",") if name.strip())
    for slots in re.findall(r"__slots__\s*=\s*\(([^)]*)\)", text):
        names.update(re.findall(r"[\"'](\w+)[\"']", slots))
    return frozenset(names)


@functools.cache
def _classes() -> dict[str, list[Path]]:
    """The modules that define each class of the project."""
    found: dict[str, list[Path]] = {}
    for path in sorted({path for paths in _modules().values() for path in paths}):
        for name in re.findall(r"^\s*class\s+(\w+)", path.read_text(encoding="utf-8"), re.M):
            found.setdefault(name, []).append(path)
    return found


def _stale_code_names(text: str) -> list[str]:
    stale = []
    for ticked in _TICKED.findall(text):
        ticked = ticked.rstrip(".,:;")
        if re.fullmatch(r"\w+\.py", ticked):
            if ticked not in _python_file_names():
                stale.append(ticked)
        elif re.fullmatch(r"(minibroker|storage|clients)(\.\w+)+", ticked):
            if not _import_path_exists(ticked):
                stale.append(ticked)
        elif match := _QUALIFIED.fullmatch(ticked):
            owner, name = match.groups()
            if owner in _classes() and owner not in JAVA_CLASSES and re.fullmatch(r"_?[a-z][a-z0-9_]*", name):
                where = _classes()[owner]  # Class.method
            elif owner in _core_modules() and name[0].isupper():
                where = _core_modules()[owner]  # module.Name
            else:
                continue
            if not any(name in _defined(path) for path in where):
                stale.append(ticked)
    return stale


@functools.cache
def _python_file_names() -> frozenset[str]:
    """Every Python file name in the tree (a lab's ``scenario.py``, the harness's ``stomp_bench.py``)."""
    return frozenset(p.name for top in TOP_FOLDERS for p in (ROOT / top).rglob("*.py") if "node_modules" not in p.parts)


@functools.cache
def _core_modules() -> dict[str, list[Path]]:
    """The broker's and the storage's modules by name: ``flow`` for ``flow.Receipts``."""
    return {
        name: [p for p in paths if p.relative_to(ROOT).parts[0] in ("minibroker", "storage")]
        for name, paths in _modules().items()
        if not name.endswith(".py") and any(p.relative_to(ROOT).parts[0] in ("minibroker", "storage") for p in paths)
    }


def _import_path_exists(dotted: str) -> bool:
    """``minibroker.trace`` or ``clients.spark.synth`` is a module or package, or a name one defines."""
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        base = ROOT.joinpath(*parts[:cut])
        module = base / "__init__.py" if base.is_dir() else base.with_suffix(".py")
        if module.exists():
            rest = parts[cut:]
            return not rest or (len(rest) == 1 and rest[0] in _defined(module))
    return False


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids)
def test_every_module_class_and_function_named_exists(doc: Path) -> None:
    stale = _stale_code_names(doc.read_text(encoding="utf-8"))
    assert not stale, f"{doc.relative_to(ROOT)} names code that is not there: {stale}"


def test_the_check_finds_a_stale_name() -> None:
    """The check above can fail: a module, a method and a module's name that do not exist."""
    text = "`no_such_module.py`, `Broker.no_such_method`, `usage.NoSuchThing`, `Usage.has_space`"
    assert _stale_code_names(text) == ["no_such_module.py", "Broker.no_such_method", "usage.NoSuchThing"]
    assert not _repo_path_exists("minibroker/no_such_module.py")
    assert _repo_path_exists("tests/disk_faults.PowerLossDisk")
    assert _unknown_in_named_file("- `minibroker/core/flow.py`: `_park` holds the SEND") == [
        "minibroker/core/flow.py: _park"
    ]
    several = "`minibroker/core/hooks.py` logs it; `minibroker/core/flow.py`, `_park`, holds the SEND"
    assert _unknown_in_named_file(several) == ["minibroker/core/flow.py: _park"]


def test_every_key_a_lab_may_set_is_in_the_authors_page() -> None:
    """``docs/labs.md`` is the one reference of ``lab.toml``: each key ``clients/labs/model.py``
    reads is on it (``["wrong"]`` is a hint's grade, not a key)."""
    reader = (ROOT / "clients" / "labs" / "model.py").read_text(encoding="utf-8")
    keys = set(re.findall(r"""(?:\.get\(|\[)"([a-z_]+)"[,)\]]""", reader)) - {"wrong"}
    assert {"name", "expect", "no_rabbitmq", "tolerance"} <= keys  # the reader is still read this way
    page = (ROOT / "docs" / "labs.md").read_text(encoding="utf-8")
    missing = sorted(key for key in keys if not re.search(rf"^\s*\[*{key}\b|`{key}\b", page, re.M))
    assert not missing, f"lab.toml keys docs/labs.md does not describe: {missing}"


def test_the_readme_is_a_front_page_that_lists_every_lab() -> None:
    """At most 250 lines: what minibroker is, the two commands, the tour, the labs, where
    things are; the operator's manual is in docs/. The labs' table has one row per lab."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 250
    headings = re.findall(r"^## (.+)$", text, re.M)
    for wanted in ("Two commands", "A five-minute tour", "The labs", "Where things are"):
        assert wanted in headings, headings
    assert "make run" in text and "make test" in text
    rows = re.findall(r"^\| \[(\d\d)\]\(examples/labs/((\d\d)-[\w-]+)/README\.md\) \|", text, re.M)
    labs = sorted(p.name for p in (ROOT / "examples" / "labs").iterdir() if (p / "lab.toml").exists())
    assert [directory for _, directory, _ in rows] == labs
    assert all(number == prefix for number, _, prefix in rows)


def _unknown_in_named_file(text: str) -> list[str]:
    """In a paragraph or bullet that points to one file of the code (``minibroker/core/flow.py``),
    the private names and calls it gives bare (```_park```, ```has_room()```) are that file's."""
    text = re.sub(r"```.*?```", "", text, flags=re.S)
    unknown = []
    for block in re.split(r"\n\s*\n|\n(?=- )", text):
        files = set(re.findall(r"`((?:minibroker|storage|clients)/[\w/]+\.py)`", block))
        if len(files) != 1 or not (ROOT / (named := files.pop())).exists():
            continue
        for name in re.findall(r"`(_\w+)(?:\(\))?`|`([a-z]\w*)\(\)`", block):
            bare = name[0] or name[1]
            if not bare.startswith("__") and bare not in _defined(ROOT / named):
                unknown.append(f"{named}: {bare}")
    # Where a paragraph names several files, a name given right after one is that file's:
    # "`minibroker/core/flow.py`, `park`" or "`minibroker/core/sampling.py` `_sample_connections`".
    for named, bare in re.findall(r"`((?:minibroker|storage|clients)/[\w/]+\.py)`,? `(\w+)(?:\(\))?`", text):
        if (ROOT / named).exists() and not bare.startswith("__") and bare not in _defined(ROOT / named):
            unknown.append(f"{named}: {bare}")
    return sorted(set(unknown))


@pytest.mark.parametrize("doc", DOCUMENTS, ids=_ids)
def test_the_names_given_beside_a_file_are_in_it(doc: Path) -> None:
    unknown = _unknown_in_named_file(doc.read_text(encoding="utf-8"))
    assert not unknown, f"{doc.relative_to(ROOT)} points to code that is not there: {unknown}"


def test_every_file_the_code_names_exists() -> None:
    """A docstring or comment that sends its reader to ``minibroker/core/flow.py`` or
    ``docs/labs.md``: the file is there (this module's own examples of a stale name aside)."""
    named_file = re.compile(r"(?<![\w/.-])((?:" + "|".join(TOP_FOLDERS) + r")/[\w/.-]*\.(?:py|md|toml))\b")
    missing = [
        f"{path.relative_to(ROOT)}: {named}"
        for package in CODE_PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if "harness" not in path.parts and path != Path(__file__).resolve()
        for named in named_file.findall(path.read_text(encoding="utf-8"))
        if "NN" not in named and not _repo_path_exists(named)
    ]
    assert not missing, missing


def test_no_file_keeps_a_merge_conflicts_markers() -> None:
    """A merge's conflict left in a document or a source reads as text to every tool but git."""
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    marked = []
    for name in tracked:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".toml", ".txt", ".cfg", ".json", ".html", ".js"} or not path.is_file():
            continue
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
        marked += [f"{name}:{i}" for i, line in enumerate(lines, 1) if line.startswith(("<<<<<<< ", ">>>>>>> "))]
    assert not marked, marked
