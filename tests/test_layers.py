"""The layers of the package: no import cycle, no layer imports one above it, and docs/design.md §3 draws them
as they are (its floors and its "who imports whom").

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


DESIGN = PACKAGE.parent / "docs" / "design.md"


def _floors() -> dict[str, int]:
    """The floor of each unit of the house (a package ``name/`` or a module ``name.py``) as design.md §3 draws it:
    the lines ``  N  unit unit ...`` between its heading and the next."""
    text = DESIGN.read_text()
    section = text[text.index("## §3"):]
    section = section[:section.index("\n## ", 1)]
    floors = {}
    for line in section.splitlines():
        words = line.split()
        if line.startswith("    ") and len(words) > 1 and words[0].isdigit():
            for word in words[1:]:
                if word.endswith(("/", ".py")):
                    floors[word.rstrip("/").removesuffix(".py")] = int(words[0])
    return floors


def _unit(module: str) -> str | None:
    """The unit of a polydg module: the first name under polydg (None for polydg's own ``__init__``)."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else None


def test_every_import_goes_down_the_floors_that_the_design_draws(graph):
    """design.md §3's diagram is the contract: a module imports its own unit or a unit on a lower floor; every
    unit of the package is on the diagram."""
    floors = _floors()
    assert len(set(floors.values())) == 10 and floors["assemble"] == 10 and floors["cli"] == 9, floors
    units = {_unit(name) for name in graph} - {None}
    assert units - set(floors) == set(), f"units missing from design.md §3: {sorted(units - set(floors))}"
    climbs = sorted(f"{name} ({floors[_unit(name)]}) -> {target} ({floors[_unit(target)]})"
                    for name, targets in graph.items() if _unit(name) is not None
                    for target in targets if _unit(target) not in (None, _unit(name))
                    and floors[_unit(target)] >= floors[_unit(name)])
    assert climbs == [], "imports that do not go down design.md §3's floors:\n" + "\n".join(climbs)


def _drawn_imports() -> dict[str, set[str]]:
    """design.md §3's "who imports whom": ``unit -> unit unit ...`` statements (several on a line split by ";",
    a statement continued on indented lines; words in parentheses are notes)."""
    import re

    text = DESIGN.read_text()
    block = text[text.index("Who imports whom"):]
    block = block[block.index("\n\n") + 2:block.index("\n\nRules")]
    statements: list[str] = []
    for line in block.splitlines():
        for piece in line.split(";"):
            if "->" in piece:
                statements.append(piece)
            elif piece.strip():
                statements[-1] += " " + piece
    drawn = {}
    for statement in statements:
        left, right = re.sub(r"\([^)]*\)", " ", statement).split("->")
        for unit in left.replace(",", " ").split():
            drawn[unit] = set(right.split())
    return drawn


def test_the_design_names_who_imports_whom_as_the_code_does(graph):
    drawn = _drawn_imports()
    actual: dict[str, set[str]] = {}
    for name, targets in graph.items():
        if _unit(name) is not None:
            actual.setdefault(_unit(name), set()).update(_unit(t) for t in targets
                                                         if _unit(t) not in (None, _unit(name)))
    differ = {unit: {"drawn, not imported": sorted(drawn.get(unit, set()) - actual[unit]),
                     "imported, not drawn": sorted(actual[unit] - drawn.get(unit, set()))}
              for unit in actual if drawn.get(unit, set()) != actual[unit] and (actual[unit] or unit in drawn)}
    assert differ == {}, f"design.md §3's imports differ from the code's: {differ}"
