"""The package's import graph: one-way data flow, no cycles, a core free of torch, plotting
and the CLI. Every import is counted, including those inside functions."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1] / "solver"
CORE = ("model", "io", "cost", "subproblems", "baselines", "solve", "online")
FORBIDDEN_IN_CORE = ("torch", "matplotlib", "solver.cli", "solver.runtime", "benchmarks")


def _module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_module(name: str) -> bool:
    base = PKG.parent / name.replace(".", "/")
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


def _imports_of_source(src: str, module: str, is_package: bool) -> set[str]:
    """Every module the source imports anywhere in its body (absolute names). `from P import x`
    counts as importing P and, where x is a module, P.x."""
    pkg = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            subs = {f"{target}.{a.name}" for a in node.names if _is_module(f"{target}.{a.name}")}
            only_submodules = bool(subs) and len(subs) == len(node.names)
            if not (only_submodules and module.startswith(target + ".")):
                out.add(target)     # an ancestor package is initialised first anyway
            out |= subs
    return out


def _imports(path: Path) -> set[str]:
    return _imports_of_source(path.read_text(encoding="utf-8"), _module_name(path), path.name == "__init__.py")


def _graph() -> dict[str, set[str]]:
    """module -> the package modules it imports (resolved to the longest known module name;
    its own ancestor packages left out, as Python initialises them first anyway)."""
    mods = {_module_name(p) for p in PKG.rglob("*.py")}
    g: dict[str, set[str]] = {}
    for name in mods:
        path = PKG.parent / (name.replace(".", "/") + ("/__init__.py" if _is_package(name) else ".py"))
        deps = set()
        for imp in _imports(path):
            while imp and imp not in mods:
                imp = imp.rpartition(".")[0]
            if imp and imp != name and not name.startswith(imp + "."):
                deps.add(imp)
        g[name] = deps
    return g


def _is_package(name: str) -> bool:
    return (PKG.parent / name.replace(".", "/") / "__init__.py").exists()


def _cycles(g: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    counter = [0]

    def visit(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in g.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return out


def test_the_walker_sees_function_level_imports() -> None:
    src = "import numpy\ndef f():\n    from ..cost import evaluate\n    from .. import baselines\n    import torch\n"
    assert _imports_of_source(src, "solver.online.x", False) == {
        "numpy", "solver.cost", "solver.cost.evaluate", "solver.baselines", "torch"}


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles() -> None:
    assert _cycles(_graph()) == []


@pytest.mark.parametrize("sub", CORE)
def test_core_imports_no_torch_plotting_or_cli(sub: str) -> None:
    bad = []
    for path in (PKG / sub).rglob("*.py"):
        for imp in _imports(path):
            if any(imp == f or imp.startswith(f + ".") for f in FORBIDDEN_IN_CORE):
                bad.append(f"{_module_name(path)} imports {imp}")
    assert bad == []


def test_core_never_imports_the_top_level_package() -> None:
    """`import solver` inside the core would hide an edge to everything."""
    bad = [f"{_module_name(p)}" for sub in CORE for p in (PKG / sub).rglob("*.py")
           if "solver" in _imports(p)]
    assert bad == []
