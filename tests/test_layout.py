"""The package's layout: Airflow faces over Airflow-free domain packages, no import circles."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

PACKAGE = "airflow_provider_pathways"
ROOT = Path(__file__).resolve().parent.parent / PACKAGE
FACES = ("hooks", "operators", "sensors", "triggers")
DOMAINS = ("gke", "slurm", "cache")
#: Shared domain modules beside the backend packages.
SHARED_DOMAIN = ("reattach_rules", "tpu_hours")
CLIENT_LIBRARIES = (
    "airflow",
    "kubernetes",
    "kubernetes_asyncio",
    "aiohttp",
    "asyncssh",
    "paramiko",
    "google",
)


def _modules() -> dict[str, Path]:
    found = {}
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        found[name] = path
    return found


MODULES = _modules()


def _is_type_checking(node: ast.If) -> bool:
    return "TYPE_CHECKING" in ast.unparse(node.test)


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports at run time, anywhere in it (``TYPE_CHECKING`` blocks excluded)."""
    tree = ast.parse(path.read_text())
    skipped = {
        id(n)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and _is_type_checking(node)
        for n in ast.walk(node)
    }
    names: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skipped:
            continue
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def _own_imports(name: str) -> set[str]:
    return {imported for imported in _imports(MODULES[name]) if imported in MODULES and imported != name}


def test_no_module_imports_in_a_circle() -> None:
    graph = {name: _own_imports(name) for name in MODULES}
    # A package's __init__ re-exporting its modules is not a circle through them.
    graph = {
        name: {dep for dep in deps if not (name.startswith(dep + ".") and MODULES[dep].name == "__init__.py")}
        for name, deps in graph.items()
    }
    cycles: list[list[str]] = []
    state: dict[str, int] = {}

    def visit(name: str, stack: list[str]) -> None:
        state[name] = 1
        for dep in sorted(graph[name]):
            if state.get(dep) == 1:
                cycles.append([*stack[stack.index(dep) :], dep])
            elif dep not in state:
                visit(dep, [*stack, dep])
        state[name] = 2

    for name in graph:
        if name not in state:
            visit(name, [name])
    assert cycles == []


@pytest.mark.parametrize("domain", [*DOMAINS, *SHARED_DOMAIN])
def test_domain_modules_import_neither_airflow_nor_the_faces(domain: str) -> None:
    prefix = f"{PACKAGE}.{domain}"
    offending = {}
    for name, path in MODULES.items():
        if name != prefix and not name.startswith(prefix + "."):
            continue
        bad = {
            imported
            for imported in _imports(path)
            if imported.split(".")[0] == "airflow"
            or any(imported.startswith(f"{PACKAGE}.{face}") for face in FACES)
        }
        if bad:
            offending[name] = sorted(bad)
    assert offending == {}


def test_importing_the_domain_loads_no_client_library() -> None:
    domain = [
        name for name in MODULES if name.split(".")[1:2] and name.split(".")[1] in (*DOMAINS, *SHARED_DOMAIN)
    ]
    # Namespace-package stubs (``google`` from a .pth file) may be there before anything is imported.
    code = (
        "import importlib, sys\n"
        "before = set(sys.modules)\n"
        f"for name in {domain!r}:\n"
        "    importlib.import_module(name)\n"
        "loaded = {m.split('.')[0] for m in set(sys.modules) - before}\n"
        f"print(','.join(sorted(loaded & {set(CLIENT_LIBRARIES)!r})))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == ""
