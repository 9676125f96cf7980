"""The build of the core in use: compiled by mypyc or the interpreted source.

``make test`` runs the suite with ``MINIBROKER_CORE=compiled`` (the core's tests
again with ``interpreted``): the first test fails when the build asked for is
not the one loaded. The others check, on a package of their own in a temporary
directory, that an extension whose source was edited since the build never
runs in place of that source, and the serve command's first log line."""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from minibroker import corebuild

ROOT = Path(__file__).resolve().parents[2]


def test_the_build_asked_for_is_the_one_loaded() -> None:
    build = corebuild.current()
    asked = os.environ.get(corebuild.CORE_ENV, "")
    assert corebuild.requested_but_missing() == ""
    if asked:
        assert build.name == asked, build.describe()
    for module in corebuild.COMPILED_MODULES:
        importlib.import_module(module)
    loaded = {module: corebuild.loaded_as_extension(module) for module in corebuild.COMPILED_MODULES}
    if build.name == "compiled":
        assert all(loaded.values()), f"loaded from source: {[m for m, ext in loaded.items() if not ext]}"
        assert build.describe().startswith("core: compiled (mypyc ")
    else:
        assert not any(loaded.values()), f"loaded compiled: {[m for m, ext in loaded.items() if ext]}"
        assert build.describe().startswith("core: interpreted")


def _package(tmp_path: Path, answer: int) -> tuple[Path, list[str]]:
    """A package ``pkg`` with one module ``pkg.leaf``, a file where its extension
    would be (not a loadable one: importing it fails), and the build's manifest."""
    pkg = tmp_path / "pkg"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "leaf.py").write_text(f"ANSWER = {answer}\n")
    (pkg / f"leaf{corebuild.python_tag()}").write_bytes(b"not an extension")
    (tmp_path / f"{corebuild.GROUP_MODULE}{corebuild.python_tag()}").write_bytes(b"not an extension")
    modules = ["pkg.leaf"]
    manifest = {
        "compiler": "mypyc 9.9",
        "python": corebuild.python_tag(),
        "sources": corebuild.source_digests(modules, tmp_path),
    }
    (pkg / "compiled.json").write_text(json.dumps(manifest))
    return pkg, modules


def test_a_fresh_build_is_used(tmp_path: Path) -> None:
    pkg, modules = _package(tmp_path, 1)
    assert corebuild.check_build(modules, tmp_path, pkg / "compiled.json") == ("mypyc 9.9", "")


def test_a_source_edited_after_the_build_makes_it_stale(tmp_path: Path) -> None:
    pkg, modules = _package(tmp_path, 1)
    (pkg / "leaf.py").write_text("ANSWER = 2\n")
    compiler, why = corebuild.check_build(modules, tmp_path, pkg / "compiled.json")
    assert compiler == ""
    assert why.startswith("stale, source edited since the build: pkg.leaf")


def test_a_build_for_another_python_or_without_its_manifest_is_not_used(tmp_path: Path) -> None:
    pkg, modules = _package(tmp_path, 1)
    manifest = json.loads((pkg / "compiled.json").read_text())
    (pkg / "compiled.json").write_text(json.dumps({**manifest, "python": ".cpython-399-x.so"}))
    assert "not this Python" in corebuild.check_build(modules, tmp_path, pkg / "compiled.json")[1]
    (pkg / "compiled.json").unlink()
    assert "without a readable compiled.json" in corebuild.check_build(modules, tmp_path, pkg / "compiled.json")[1]
    assert corebuild.check_build(["pkg.other"], tmp_path, pkg / "compiled.json")[1] == corebuild.NOT_COMPILED


def test_a_build_without_its_groups_library_is_not_used(tmp_path: Path) -> None:
    pkg, modules = _package(tmp_path, 1)
    (tmp_path / f"{corebuild.GROUP_MODULE}{corebuild.python_tag()}").unlink()
    assert f"without {corebuild.GROUP_MODULE}" in corebuild.check_build(modules, tmp_path, pkg / "compiled.json")[1]


def test_the_build_in_use_loads_from_any_working_directory(tmp_path: Path) -> None:
    """An installed command runs from anywhere: the compiled modules find their group's
    library though the project's root is not on the path (an editable install maps the
    packages only)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    run = subprocess.run(
        [sys.executable, "-c", "from minibroker import corebuild; print(corebuild.describe())"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
        timeout=60,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == corebuild.describe()


def test_the_source_is_loaded_ahead_of_the_extension_beside_it(tmp_path: Path) -> None:
    """The extension here cannot load: without the finder the import fails on it
    (Python prefers an extension to a source of the same name); with it, the
    edited source runs."""
    _package(tmp_path, 2)
    script = textwrap.dedent(
        f"""
        import sys
        from pathlib import Path
        sys.path.insert(0, {str(tmp_path)!r})
        from minibroker import corebuild
        if sys.argv[1] == "source-first":
            sys.meta_path.insert(0, corebuild.SourceFirst(["pkg.leaf"], Path({str(tmp_path)!r})))
        import pkg.leaf
        print(pkg.leaf.ANSWER, pkg.leaf.__file__.endswith(".py"))
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    plain = subprocess.run([sys.executable, "-c", script, "plain"], capture_output=True, text=True, env=env, timeout=60)
    assert plain.returncode != 0 and "ImportError" in plain.stderr
    first = subprocess.run(
        [sys.executable, "-c", script, "source-first"], capture_output=True, text=True, env=env, timeout=60
    )
    assert first.returncode == 0, first.stderr
    assert first.stdout.split() == ["2", "True"]


def test_the_recorded_digest_is_the_sources_sha256(tmp_path: Path) -> None:
    pkg, modules = _package(tmp_path, 3)
    assert corebuild.source_digests(modules, tmp_path) == {
        "pkg.leaf": hashlib.sha256((pkg / "leaf.py").read_bytes()).hexdigest()
    }


@pytest.mark.parametrize("asked", ["interpreted", ""])
def test_serve_names_the_build_in_its_first_log_line(asked: str, tmp_path: Path) -> None:
    """``serve`` says first which build runs, before it reads its configuration (a
    configuration file that does not exist: the command then stops)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), corebuild.CORE_ENV: asked}
    result = subprocess.run(
        [sys.executable, "-m", "clients.cli", "serve", "--config", str(tmp_path / "missing.toml")],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        cwd=ROOT,
    )
    first = result.stderr.splitlines()[0]
    if asked == "interpreted":
        assert first.endswith("minibroker: core: interpreted (MINIBROKER_CORE=interpreted)")
        return
    compiler, _ = corebuild.check_build(corebuild.COMPILED_MODULES, ROOT, ROOT / "minibroker" / corebuild.MANIFEST_NAME)
    if compiler:
        assert first.endswith(f"minibroker: core: compiled ({compiler})")
    else:  # the reason said, whatever it is here (no build, a stale one ...)
        assert first.endswith(f"minibroker: core: interpreted ({_reason_here(env)})")


def _reason_here(env: dict[str, str]) -> str:
    """Why the core runs interpreted in a process started with ``env``."""
    code = "from minibroker import corebuild; print(corebuild.current().reason)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert run.returncode == 0 and run.stdout.strip(), run.stderr
    return run.stdout.strip()


def _checkout(tmp_path: Path) -> Path:
    """A project root as a checkout has it (its ``setup.py`` builds the core)."""
    (tmp_path / "setup.py").write_text("")
    return tmp_path


def test_an_interpreted_core_says_why_when_nothing_was_built(tmp_path: Path) -> None:
    root = _checkout(tmp_path)
    made = corebuild.interpreted_reason(corebuild.NOT_COMPILED, root, compiler=lambda: True)
    assert made == "no compiled build: `make compiled` makes one"
    cannot = corebuild.interpreted_reason(corebuild.NOT_COMPILED, root, compiler=lambda: False)
    assert cannot == "no compiled build, and no C compiler or Python headers here to make one"
    (root / "setup.py").unlink()  # an installed package: nothing here builds it
    installed = corebuild.interpreted_reason(corebuild.NOT_COMPILED, root, compiler=lambda: True)
    assert installed == "no compiled build in this installation"


def test_an_interpreted_core_says_a_compile_runs_in_the_background(tmp_path: Path) -> None:
    """``make run`` records its background compile's process; while it lives, the first log
    line says the core is being compiled, for a missing build and a stale one alike."""
    root = _checkout(tmp_path)
    record = root / corebuild.COMPILING_PID
    record.parent.mkdir()
    compiling = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"], stdin=subprocess.PIPE)
    try:
        record.write_text(f"{compiling.pid}\n")
        assert corebuild.interpreted_reason(corebuild.NOT_COMPILED, root) == (
            "not compiled yet: compiling in the background (log in build/compile.log), the next start runs it"
        )
        stale = f"stale, source edited since the build: pkg.leaf: {corebuild.REBUILD}"
        assert corebuild.interpreted_reason(stale, root) == (
            "stale, source edited since the build: pkg.leaf: compiling in the background"
            " (log in build/compile.log), the next start runs it"
        )
    finally:
        compiling.communicate(b"")
    # the compile ended (killed: its record is left behind): the reason is the build's again
    assert corebuild.interpreted_reason(stale, root) == stale
    assert corebuild.interpreted_reason(corebuild.NOT_COMPILED, root, compiler=lambda: True).startswith(
        "no compiled build: "
    )
    for nonsense in ("0", "-1", "a build", ""):  # never a process group, never a crash
        record.write_text(nonsense)
        assert "background" not in corebuild.interpreted_reason(corebuild.NOT_COMPILED, root)
