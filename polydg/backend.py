"""The one place that knows NumPy from CuPy (DESIGN.md section 8).

Only the NumPy (CPU) path assembles today; ``cupy`` is recognised so that
the command line can say clearly what is missing.
"""

from __future__ import annotations

import importlib.util

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
