"""A stand-in for a GPU array type, so that the array-namespace code paths are tested without CuPy.

:class:`DeviceStandIn` is a NumPy array in disguise that behaves, for what
polydg relies on, as a CuPy array does: its namespace (``__array_namespace__``)
is :data:`STANDIN`, not NumPy; ufuncs and NumPy functions on it give it back;
mixing it with a host ``numpy.ndarray`` (of one element or more) raises
``TypeError``, as CuPy refuses implicit host-device mixing; ``.get()`` copies it
to a NumPy array.  Code written against ``xp = array_namespace(x)`` runs on it
and returns it; NumPy-only code either raises or returns a plain NumPy array,
which is what polydg's detection of host-only coefficient callables looks for.
"""

from __future__ import annotations

import numpy as np


def _plain(a):
    return a.view(np.ndarray) if isinstance(a, DeviceStandIn) else a


def _tree(obj, leaf):
    if isinstance(obj, (list, tuple)):
        return type(obj)(_tree(o, leaf) for o in obj)
    if isinstance(obj, dict):
        return {k: _tree(v, leaf) for k, v in obj.items()}
    return leaf(obj)


def _wrap(result):
    if type(result) is np.ndarray:
        return result.view(DeviceStandIn)
    if isinstance(result, tuple):
        return tuple(_wrap(r) for r in result)
    return result


def _refuse_host(obj) -> None:
    def check(a):
        if type(a) is np.ndarray and a.size > 1:
            raise TypeError("DeviceStandIn: implicit mixing with a host numpy.ndarray is not allowed")
        return a

    _tree(obj, check)


class DeviceStandIn(np.ndarray):
    """An ndarray subclass standing in for ``cupy.ndarray`` (see the module docstring)."""

    def __array_namespace__(self, api_version=None):
        return STANDIN

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        out = kwargs.get("out")
        _refuse_host((inputs, out or ()))
        if out is not None:
            kwargs["out"] = tuple(_plain(o) for o in out)
        result = getattr(ufunc, method)(*_tree(inputs, _plain), **kwargs)
        if out is not None:
            return out[0] if len(out) == 1 else out
        return _wrap(result)

    def __array_function__(self, func, types, args, kwargs):
        _refuse_host((args, kwargs))
        return _wrap(func(*_tree(args, _plain), **_tree(kwargs, _plain)))

    def get(self) -> np.ndarray:
        """A host copy, as ``cupy.ndarray.get()``."""
        return np.array(self.view(np.ndarray))


class _StandInNamespace:
    """NumPy's functions, their array results turned into :class:`DeviceStandIn` (the stand-in's ``xp``)."""

    __name__ = "standin"

    def __getattr__(self, name):
        attr = getattr(np, name)
        if isinstance(attr, type) or not callable(attr):
            return attr  # dtypes, constants

        def call(*args, **kwargs):
            return _wrap(attr(*args, **kwargs))

        return call

    def asarray(self, a, dtype=None):
        return _wrap(np.array(_plain(a), dtype=dtype, copy=None))

    def ascontiguousarray(self, a, dtype=None):
        return _wrap(np.ascontiguousarray(_plain(a), dtype=dtype))


STANDIN = _StandInNamespace()


def to_standin(a) -> DeviceStandIn:
    return np.array(a).view(DeviceStandIn)
