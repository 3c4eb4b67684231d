"""Each package's public surface is pinned, and nothing outside a package reaches for its private names.

Import-linter (`.importlinter`: the ``private-insides`` and ``public-surface-*`` contracts) keeps code outside a package
away from its modules; it sees modules, not names, so this test adds the other half: outside ``capstan.P`` nobody
imports an underscore name from it. The pin makes a change of the public surface a deliberate edit of
``tests/unit/public_surface.py`` rather than a side effect of a refactor.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
from pathlib import Path

import pytest

import capstan
from tests.unit.public_surface import PUBLIC_SURFACE

ROOT = Path(__file__).resolve().parents[2]
SCANNED = ("src", "bench", "tests")


def _packages() -> list[str]:
    return sorted(
        f"capstan.{info.name}"
        for info in pkgutil.iter_modules(capstan.__path__)
        if info.ispkg and not info.name.startswith("_") and info.name != "cli"
    )


def test_every_package_is_pinned() -> None:
    assert sorted(PUBLIC_SURFACE) == _packages()


@pytest.mark.parametrize("package", _packages())
def test_public_surface_is_pinned(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(getattr(module, "__all__", ()))
    assert len(exported) == len(set(exported)), f"{package}.__all__ names something twice"
    added = sorted(set(exported) - set(PUBLIC_SURFACE[package]))
    removed = sorted(set(PUBLIC_SURFACE[package]) - set(exported))
    assert not added and not removed, (
        f"{package}'s public surface moved (added {added}, removed {removed}); "
        "if that is meant, update tests/unit/public_surface.py"
    )
    assert (module.__doc__ or "").strip(), f"{package} has no docstring saying what it is"


@pytest.mark.parametrize("package", _packages())
def test_every_exported_name_resolves(package: str) -> None:
    module = importlib.import_module(package)
    for name in module.__all__:
        assert not name.startswith("_"), f"{package} exports a private name {name}"
        assert getattr(module, name) is not None, f"{package}.{name}"


def _owner(root: Path, path: Path) -> str | None:
    """The package whose insides ``path`` may touch: its own modules, or its own unit tests (``tests/unit/P``)."""
    parts = path.relative_to(root).parts
    if parts[:2] == ("src", "capstan") and len(parts) > 3:
        return parts[2]
    if parts[:2] == ("tests", "unit") and len(parts) > 3:
        return parts[2]
    return None


def _private_name_imports(root: Path = ROOT) -> list[str]:
    found = []
    for top in SCANNED:
        for path in sorted((root / top).rglob("*.py")):
            owner = _owner(root, path)
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if not isinstance(node, ast.ImportFrom) or not (node.module or "").startswith("capstan."):
                    continue
                package = (node.module or "").split(".")[1]
                if package == owner or package == "cli":
                    continue
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__"):
                        where = path.relative_to(root)
                        found.append(f"{where}:{node.lineno} imports {alias.name} from {node.module}")
    return found


def test_nothing_outside_a_package_imports_its_private_names() -> None:
    assert _private_name_imports() == []


def test_the_scan_sees_a_private_name_import(tmp_path: Path) -> None:
    """The scanner is not vacuous: over a planted tree it reports the outside import and spares the inside ones."""
    files = {
        "bench/b.py": "from capstan.capacity.planner import _plan_once\n",
        "tests/integration/t.py": "from capstan.route import Router, _hidden\n",
        "src/capstan/capacity/sim.py": "from capstan.capacity.planner import _plan_once\n",
        "tests/unit/capacity/test_p.py": "from capstan.capacity.planner import _fill\n",
        "tests/unit/route/test_r.py": "from capstan.capacity.planner import _fill\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert _private_name_imports(tmp_path) == [
        "bench/b.py:1 imports _plan_once from capstan.capacity.planner",
        "tests/integration/t.py:1 imports _hidden from capstan.route",
        "tests/unit/route/test_r.py:1 imports _fill from capstan.capacity.planner",
    ]


def test_every_module_of_capacity_is_protected_by_its_import_contract() -> None:
    """The capacity contract lists its modules one by one (its ``live`` subpackage is public); a module added to
    the package must be added there too, or code outside could import it unnoticed."""
    import configparser

    import capstan.capacity

    contracts = configparser.ConfigParser()
    contracts.read(ROOT / ".importlinter")
    listed = set(contracts["importlinter:contract:public-surface-capacity"]["protected_modules"].split())
    modules = {f"capstan.capacity.{m.name}" for m in pkgutil.iter_modules(capstan.capacity.__path__)}
    assert modules - {"capstan.capacity.live"} == listed
