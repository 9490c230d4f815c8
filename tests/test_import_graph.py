"""The import graph of ``kvdash/`` (issue 26): no circles, and no import from a lower layer to a higher one.

Every ``import`` and ``from ... import`` in every module counts, the lazy ones inside functions too (a lazy
import is still a dependency; it only hides the circle until a call reaches it).  The layers, lowest first,
are the README's development diagram (docs/development.md).  The ruff banned-api fences in pyproject.toml
guard the third-party side (textual, polars, jinja2, pynvml); this test guards kvdash's own modules."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "kvdash"

# module prefix -> layer (a module takes its longest matching prefix)
LAYERS: dict[str, int] = {
    "kvdash.units": 0, "kvdash.errors": 0, "kvdash.interrupts": 0, "kvdash.defaults": 0, "kvdash.safeio": 0,
    "kvdash.safeyaml": 0, "kvdash.netaddr": 0, "kvdash.markdown": 0, "kvdash.data": 0, "kvdash.templates": 0,
    "kvdash.core": 1,  # the pure core: engine-free formulas, models, pool geometry
    "kvdash.engines": 2,  # engine rules behind one interface (kvdash.engines.vllm: vLLM 0.33)
    "kvdash.answer": 3,  # one configuration's answer: the core composed with an engine's rules
    "kvdash.calibration": 4, "kvdash.sources": 4,  # GPU and engine sources, measured reserves
    "kvdash.live": 5, "kvdash.simulate": 5,
    "kvdash.sweep": 6, "kvdash.fleet": 6,
    "kvdash.report": 7, "kvdash.render": 7, "kvdash.exporter": 7,
    "kvdash.tui": 8, "kvdash.action": 8,
    "kvdash.commands": 9,
    "kvdash.cli": 10, "kvdash.launch": 10,
}
ROOT_PACKAGE_LAYER = 0  # kvdash/__init__.py holds the version only

# Upward imports that exist today, each to be removed by moving the shared code down (issue 26); the test
# fails on any other, and on an entry here that no longer exists (so the list only shrinks).  None are left.
KNOWN_UPWARD: set[tuple[str, str]] = set()


def modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def edges() -> dict[str, set[str]]:
    mods = modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    module = ".".join(base + ([node.module] if node.module else []))
                else:
                    module = node.module or ""
                # ``from kvdash.core import formulas`` imports the submodule, not only the package
                subs = [f"{module}.{alias.name}" for alias in node.names if f"{module}.{alias.name}" in mods]
                targets = subs or [module]
            else:
                continue
            found.update(t for t in targets if t in mods and t != name)
        graph[name] = found
    return graph


def layer(module: str) -> int:
    if module == "kvdash":
        return ROOT_PACKAGE_LAYER
    prefixes = [p for p in LAYERS if module == p or module.startswith(p + ".")]
    assert prefixes, f"{module} is in no layer: add it to LAYERS (and to docs/development.md's diagram)"
    return LAYERS[max(prefixes, key=len)]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            v, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on:
                    low[v] = min(low[v], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
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
    return out


def test_the_graph_sees_lazy_imports():
    """The checker itself: kvdash.commands.calc imports kvdash.commands.simulate_time inside a function."""
    assert "kvdash.commands.simulate_time" in edges()["kvdash.commands.calc"]


def test_the_cycle_finder_finds_a_planted_circle():
    """a -> b -> c -> a is one circle; d hangs off it and is in none."""
    assert [["a", "b", "c"]] == cycles({"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()})


def test_no_import_circles():
    """No module of kvdash/ reaches itself through imports (issue 26 broke model <-> modeltypes,
    calibration <-> live.analysis, commands.calc <-> simulate_time, commands.fleet <-> commands.live)."""
    assert [] == cycles(edges())


def test_every_module_has_a_layer():
    """A new package or top-level module must be placed in the diagram before it can be checked."""
    assert all(layer(m) >= 0 for m in modules())


def test_no_new_import_from_a_lower_layer_to_a_higher_one():
    """Every import goes down or sideways; the known upward ones are listed above, to be removed."""
    upward = {(a, b) for a, outs in edges().items() for b in outs if layer(b) > layer(a)}
    assert set() == upward - KNOWN_UPWARD, "new upward imports"
    assert set() == KNOWN_UPWARD - upward, "gone: remove them from KNOWN_UPWARD"


def test_the_core_imports_no_engine_module():
    """Issue 26: engine rules live in kvdash.engines, above the engine-free core; the core names no engine."""
    graph = edges()
    assert graph["kvdash.engines.vllm"], "the checker sees the engine module's imports"
    assert [] == sorted((a, b) for a, outs in graph.items() if layer(a) == LAYERS["kvdash.core"]
                        for b in outs if b.startswith("kvdash.engines"))
