"""The command line run as the program (a subprocess) or as ``main()`` in the test's process.

``main()`` holds the command line's whole contract (its one line on stderr,
its exit code); the program only hands ``main()``'s code to ``sys.exit``.
Runs that check a message, an option or an output file call :func:`in_process`
(no interpreter, imports and kernel loads of their own: about a second each);
the tests of what only a process shows (the exit status, a terminal, threads
from the environment, signals) run :func:`program`.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from contextlib import redirect_stderr, redirect_stdout


def program(*args, cwd=None, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m polydg.assemble ARGS`` (one OpenMP thread unless ``env`` says otherwise)."""
    env = dict(os.environ, OMP_NUM_THREADS="1", **(env or {}))
    return subprocess.run([sys.executable, "-m", "polydg.assemble", *map(str, args)], capture_output=True,
                          text=True, env=env, cwd=cwd, timeout=timeout)


def in_process(*args) -> subprocess.CompletedProcess:
    """``polydg.assemble.main(ARGS)`` here: its return value as the exit code, what it printed as stdout and
    stderr, with one OpenMP thread as :func:`program`.  ``main()`` called with arguments restores the signal
    handlers and hooks it set; the environment (a run's ``--memory-limit``, the OpenMP wait policy) and the
    thread settings (Numba's count, whether polydg applied the environment's) are restored here.  Only
    Python's ``sys.stdout`` and ``sys.stderr`` are read: the tests of what the process prints in all (its
    file descriptors, compilation lines on a cold start) run :func:`program`."""
    import numba

    import polydg.threads
    from polydg.assemble import main

    out, err = io.StringIO(), io.StringIO()
    environ, threads, applied = dict(os.environ), numba.get_num_threads(), polydg.threads._APPLIED
    os.environ["OMP_NUM_THREADS"] = "1"
    try:
        with redirect_stdout(out), redirect_stderr(err):
            code = main([str(a) for a in args])
    finally:
        os.environ.clear()
        os.environ.update(environ)
        numba.set_num_threads(threads)
        polydg.threads._APPLIED = applied
    return subprocess.CompletedProcess(["polydg.assemble", *map(str, args)], code, out.getvalue(), err.getvalue())
