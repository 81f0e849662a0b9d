"""The one place that knows NumPy from CuPy (DESIGN.md section 8).

Only the NumPy (CPU) path assembles today; ``cupy`` is recognised so that
the command line can say clearly what is missing.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import MutableMapping

import numpy as np

from .errors import OptionError

BACKENDS = ("numpy", "cupy", "auto")


def gpu_available() -> bool:
    """True when CuPy imports and sees at least one CUDA device."""
    if importlib.util.find_spec("cupy") is None:
        return False
    try:
        import cupy

        return cupy.cuda.runtime.getDeviceCount() > 0
    except Exception:  # no driver, no device
        return False


def resolve_backend(name: str) -> str:
    """The backend that will run: "numpy" (``auto`` falls back to it without a GPU).

    Raises :class:`OptionError` for unknown names and for ``cupy`` where it
    cannot run.
    """
    if name not in BACKENDS:
        raise OptionError(f"unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")
    if name == "numpy":
        return "numpy"
    if name == "auto":
        return "numpy"  # the CuPy assembly path is not built yet
    if importlib.util.find_spec("cupy") is None:
        raise OptionError("backend 'cupy': cupy is not installed (pip install 'polydg[gpu]')")
    if not gpu_available():
        raise OptionError("backend 'cupy': no CUDA device is visible")
    raise OptionError("backend 'cupy': GPU assembly is not available in this version; use --backend numpy")


def array_module(name: str = "numpy"):
    """The array module of a resolved backend."""
    return np


def quiet_openmp_workers(environ: MutableMapping[str, str] = os.environ) -> bool:
    """Let idle OpenMP worker threads sleep instead of spin: ``OMP_WAIT_POLICY=PASSIVE``, unless set.

    OpenMP runtimes (libgomp, under Numba's parallel loops or an OpenMP
    BLAS) keep their idle workers spinning after each parallel region by
    default, and those spinners take the cores that polydg's own threads
    (:mod:`polydg.threads`: kernels, coefficient evaluation) need next.
    libgomp reads the variable once, when it is loaded, so this
    must run early; ``python -m polydg.assemble`` calls it at start.  A
    value the user set is kept.  Returns whether it set the variable.

    >>> env = {}
    >>> quiet_openmp_workers(env), env
    (True, {'OMP_WAIT_POLICY': 'PASSIVE'})
    >>> quiet_openmp_workers({"OMP_WAIT_POLICY": "ACTIVE"})
    False
    """
    if "OMP_WAIT_POLICY" in environ:
        return False
    environ["OMP_WAIT_POLICY"] = "PASSIVE"
    return True
