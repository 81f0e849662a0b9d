"""Compiled-kernel caches never outlive the code they were compiled from.

Numba's on-disk cache (``cache=True``) keys a function by the text of the
file that defines it, and by nothing else: a kernel in ``kernels.py`` that
inlines a function of ``batched.py`` keeps its cached machine code when
only ``batched.py`` changes, in a working copy or in an upgraded install
(pip leaves ``__pycache__`` behind).  So every module whose compiled code
uses another polydg module with compiled functions carries a stamp, a hash
of those modules' text, in its own text; this test keeps the stamps up to
date, and an out-of-date stamp fails it.  Update them with

    python tests/test_kernel_cache.py
"""

from __future__ import annotations

import ast
import hashlib
import re
import sys
from pathlib import Path

import pytest

import polydg

PACKAGE = Path(polydg.__file__).parent
STAMP = re.compile(r'^_SOURCES_STAMP = "([0-9a-f]*)"$', re.M)
COMPILED = re.compile(r"@(numba\.)?njit\b")


def _is_compiled(path: Path) -> bool:
    return COMPILED.search(path.read_text()) is not None


def _cached_modules() -> list[Path]:
    """polydg's modules, the launch/ scripts and the tests with compiled functions cached on disk."""
    files = list(PACKAGE.rglob("*.py")) + [p for folder in ("launch", "tests")
                                            for p in (PACKAGE.parent / folder).glob("*.py")]
    return sorted(p for p in files if _is_compiled(p) and "cache=True" in p.read_text())


def _module_file(parts: list[str]) -> list[Path]:
    """The file of polydg module ``parts`` (a list of names below the package), if there is one."""
    target = PACKAGE.joinpath(*parts)
    return [c for c in (target.with_suffix(".py"), target / "__init__.py") if c.exists()]


def _imported_modules(path: Path) -> set[Path]:
    """The polydg modules that ``path`` imports: ``from .x import y``, ``from polydg.x import y``
    (module x, and x.y where y is a module), ``import polydg.x``."""
    here = list(path.parent.relative_to(PACKAGE).parts) if PACKAGE in path.parents else None
    out: set[Path] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            module = (node.module or "").split(".") if node.module else []
            if node.level > 0 and here is not None:
                base = here[:len(here) - (node.level - 1)] + module
            elif node.level == 0 and module[:1] == ["polydg"]:
                base = module[1:]
            else:
                continue
            out.update(_module_file(base))
            for alias in node.names:
                out.update(_module_file(base + [alias.name]))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                parts = alias.name.split(".")
                if parts[0] == "polydg":
                    out.update(_module_file(parts[1:]))
    out.discard(path)
    return out


def compiled_dependencies(path: Path) -> list[Path]:
    """The modules with compiled functions that ``path`` imports: its stamp covers their text."""
    return sorted(p for p in _imported_modules(path) if _is_compiled(p))


def expected_stamp(path: Path, texts: dict[Path, bytes] | None = None) -> str:
    """The hash of the dependencies' text (read from ``texts`` where given, else from disk)."""
    digest = hashlib.sha256()
    for dependency in compiled_dependencies(path):
        digest.update(dependency.relative_to(PACKAGE).as_posix().encode())
        digest.update((texts or {}).get(dependency) or dependency.read_bytes())
    return digest.hexdigest()[:16]


def stamped_modules() -> list[Path]:
    return [p for p in _cached_modules() if compiled_dependencies(p)]


@pytest.mark.parametrize("path", stamped_modules(), ids=lambda p: p.relative_to(PACKAGE.parent).as_posix())
def test_compiled_modules_carry_the_stamp_of_the_compiled_code_they_use(path):
    found = STAMP.findall(path.read_text())
    assert len(found) == 1, f"{path} needs one line _SOURCES_STAMP = \"...\" (run python {__file__})"
    assert found[0] == expected_stamp(path), (
        f"{path.name} uses compiled code of {[p.name for p in compiled_dependencies(path)]}, which changed: "
        f"its Numba cache would keep the old machine code; run python {__file__}")


def test_the_stamp_follows_every_dependency():
    """A change to any one dependency's text changes the stamp (so the module's cache is dropped)."""
    kernels = PACKAGE / "assembly" / "kernels.py"
    dependencies = compiled_dependencies(kernels)
    assert {"batched.py", "moments.py", "forms.py", "basis.py"} <= {p.name for p in dependencies}
    before = expected_stamp(kernels)
    for dependency in dependencies:
        changed = {dependency: dependency.read_bytes() + b"\n# one more line\n"}
        assert expected_stamp(kernels, changed) != before, dependency
    assert expected_stamp(kernels) == before


def update() -> None:
    """Rewrite every stamp, dependencies first (a stamp line is part of its module's text)."""
    for _ in range(len(stamped_modules()) + 1):
        changed = False
        for path in stamped_modules():
            text = path.read_text()
            line = f'_SOURCES_STAMP = "{expected_stamp(path)}"'
            new = STAMP.sub(line, text) if STAMP.search(text) else None
            if new is None:
                sys.exit(f"{path}: add a line {line} after its imports, with a comment saying why")
            if new != text:
                path.write_text(new)
                print(f"updated {path.relative_to(PACKAGE.parent).as_posix()}")
                changed = True
        if not changed:
            return
    sys.exit("the stamps did not settle: a cycle of imports between compiled modules?")


if __name__ == "__main__":
    update()
