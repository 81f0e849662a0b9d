"""Finding a problem by its spec: a built-in name, ``path/to/file.py:NAME`` or ``package.module:NAME``.

User files and modules are imported with what they print and warn held
back (:func:`~polydg.errors.capture_output`): shown as usual when they load,
folded into the one-line :class:`~polydg.errors.ProblemError` when they fail,
so that a bad problem file is one error line on the command line.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from typing import Any, Callable

from ..errors import ProblemError, capture_output
from .builtin import BUILTIN_PROBLEMS, builtin_problem, did_you_mean, unknown_problem
from .contract import Problem, _one_line
from .protocol import _adapt


def _run_user_code(function: Callable[[], Any], failed: Callable[[BaseException], str]) -> Any:
    """``function()``, user code, with what it prints and warns held back until it is done.

    When it returns, its output is shown as if it had not been held back; when
    it raises, the output becomes part of the one-line :class:`ProblemError`
    whose message is ``failed(exc)``.
    """
    with capture_output() as said:
        try:
            result, failure = function(), None
        except BaseException as exc:  # SystemExit included: a problem file must not end the program
            result, failure = None, exc
    if failure is None:
        said.replay()
        return result
    if isinstance(failure, KeyboardInterrupt):
        said.replay()
        raise failure
    message = str(failure) if isinstance(failure, ProblemError) else failed(failure)
    output = said.summary()
    raise ProblemError(message + (f" (its output: {output})" if output else "")) from failure


def _import_failure(where: str, path: str | None) -> Callable[[BaseException], str]:
    """How an import of ``where`` (the file ``path``, if one) failed, in one line."""

    def describe(exc: BaseException) -> str:
        if isinstance(exc, SyntaxError):
            elsewhere = f" in {exc.filename}" if exc.filename and exc.filename != path else ""
            line = f" at line {exc.lineno}" if exc.lineno else ""
            return f"{where}: syntax error{elsewhere}{line}: {_one_line(exc.msg)}"
        return f"{where}: import failed: {type(exc).__name__}: {_one_line(exc)}"

    return describe


def _import_file(path: str) -> Any:
    where = f"problem file {path!r}"
    if not os.path.exists(path):
        raise ProblemError(f"{where} not found")
    if not os.path.isfile(path):
        raise ProblemError(f"{where} is not a file")
    module_name = "_polydg_problem_" + "".join(c if c.isalnum() else "_" for c in os.path.abspath(path))
    spec = importlib.util.spec_from_file_location(module_name, path)
    if spec is None or spec.loader is None:
        raise ProblemError(f"{where} cannot be imported (not a Python file?)")
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        _run_user_code(lambda: spec.loader.exec_module(module), _import_failure(where, path))
    except BaseException:
        sys.modules.pop(module_name, None)
        raise
    return module


def _import_module(name: str) -> Any:
    where = f"problem module {name!r}"

    def failed(exc: BaseException) -> str:
        if isinstance(exc, ModuleNotFoundError) and exc.name and name.startswith(exc.name):
            return f"{where} not found{did_you_mean(name) if '.' not in name else ''}"
        return _import_failure(where, None)(exc)

    return _run_user_code(lambda: importlib.import_module(name), failed)


def load_problem(spec: str, dim: int | None = None) -> Problem:
    """Find a problem by its spec and check it fits ``dim`` dimensions.

    ``spec`` is a built-in name (:func:`builtin_problem`), or
    ``path/to/file.py:NAME`` (the file is imported by path), or
    ``package.module:NAME``.  NAME (default ``problem`` for a bare ``.py``
    path) is whatever :func:`~polydg.problem.protocol.as_problem` accepts:
    a :class:`Problem`, any object (a plain class or instance) with some of
    the contract's attributes, or a callable returning one of these, called
    with ``dim`` when it takes an argument.

    >>> load_problem("paper", 3).name
    'paper-3d'
    """
    spec = str(spec).strip()
    if not spec:
        raise ProblemError("empty problem spec")
    head = spec.split(":")[0]
    if head in BUILTIN_PROBLEMS or head in ("paper", "polynomial"):
        problem = builtin_problem(spec, dim)
        if dim is not None:
            problem.check_dimension(dim)
        return problem
    target, sep, attribute = spec.rpartition(":")
    if not sep or (os.sep in attribute or attribute.endswith(".py")):
        target, attribute = spec, ""
    is_file = target.endswith(".py") or os.sep in target or "/" in target
    if not is_file and not sep:
        raise unknown_problem(spec)
    attribute = attribute or "problem"
    where = f"problem file {target!r}" if is_file else f"problem module {target!r}"
    module = _import_file(target) if is_file else _import_module(target)
    if not hasattr(module, attribute):
        found = sorted(k for k, v in vars(module).items() if isinstance(v, Problem))
        hint = f" (Problem objects there: {', '.join(found)})" if found else ""
        raise ProblemError(f"{where} has no attribute {attribute!r}{hint}")
    # a factory runs like the import: what it prints is held back until it succeeds
    return _adapt(getattr(module, attribute), dim, f"{where}: {attribute}", run=_run_user_code)
