"""The layers of the package: no import cycle, and no layer imports one above it.

Every ``import`` of every module of polydg is read with ``ast``, those inside
functions included (a lazy import is still a dependency), and resolved to the
module it loads: ``from .assembly import assemble`` loads ``polydg.assembly``
(its ``__init__``), ``from . import basis`` loads ``polydg.basis``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "polydg"


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The polydg modules that importing ``name`` (at ``path``) runs, from its imports anywhere in its text.

    Importing ``a.b.c`` runs ``a`` and ``a.b`` first: the parent packages count too, except the
    importer's own (already running when it runs).  ``from X import y`` imports ``X.y`` where that
    is a module, else takes the name ``y`` from ``X``'s ``__init__``, which must then have run.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    own = {".".join(name.split(".")[:k]) for k in range(1, name.count(".") + 1)}
    loaded = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            loaded.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[:len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            for alias in node.names:
                submodule = f"{base}.{alias.name}"
                loaded.add(submodule if submodule in modules else base)
                if submodule not in modules or base not in own:  # a name of X, or X run on the way to X.y
                    loaded.add(base)
    found = set()
    for target in loaded:
        while target and target not in modules:  # outside polydg, or a name inside a module
            target = target.rpartition(".")[0]
        while target:
            if target != name and (target not in own or target in loaded):
                found.add(target)
            target = target.rpartition(".")[0]
    return found & set(modules)


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle (its modules in order, the first repeated at the end), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph[node]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state:
                found = visit(nxt)
                if found:
                    return found
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state:
            found = visit(node)
            if found:
                return found
    return None


def test_the_walk_sees_lazy_and_relative_imports(graph):
    # a sanity check of the walk itself: imports inside functions and relative ones are found
    assert "polydg.assembly.cuda_passes" in graph["polydg.assembly.reductions.registry"]  # inside execute()
    assert "polydg.assembly.plan" in graph["polydg.assembly.assembler"]
    assert {"polydg.cli", "polydg.cli.main"} <= graph["polydg.assemble"]
    assert "polydg.assembly" in graph["polydg.partition.ranks"]  # "from ..assembly.plan import" runs its __init__
    assert "polydg" not in graph["polydg.solve"]  # "from . import basis": polydg runs before polydg.solve anyway
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_no_import_cycle(graph):
    cycle = _cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def _importers(graph, prefix: str) -> dict[str, list[str]]:
    return {name: sorted(t for t in targets if t == prefix or t.startswith(prefix + "."))
            for name, targets in graph.items() if any(t == prefix or t.startswith(prefix + ".") for t in targets)}


def test_only_the_entry_imports_the_command_line(graph):
    # polydg.cli is the top of the house: polydg.assemble (the -m entry) alone imports it; nothing imports the entry
    outside = {name: targets for name, targets in _importers(graph, "polydg.cli").items()
               if not name.startswith("polydg.cli") and name != "polydg.assemble"}
    assert outside == {}, f"library modules importing the command line: {outside}"
    assert _importers(graph, "polydg.assemble") == {}


@pytest.mark.parametrize("layer, above", [
    ("polydg.assembly", ("polydg.distributed", "polydg.spacetime", "polydg.cli")),
    ("polydg.spacetime", ("polydg.distributed", "polydg.cli")),
    ("polydg.distributed", ("polydg.cli",)),
])
def test_a_layer_never_imports_a_layer_above_it(graph, layer, above):
    wrong = {name: sorted(t for t in targets if t.startswith(above))
             for name, targets in graph.items()
             if (name == layer or name.startswith(layer + ".")) and any(t.startswith(above) for t in targets)}
    assert wrong == {}, f"{layer} imports a layer above it: {wrong}"
