"""Exceptions raised by polydg on bad input.

Every error a user can cause by their input derives from :class:`PolyDGError`;
the command line turns these into a one-line message and exit code 2.
"""


class PolyDGError(Exception):
    """Base class of all input errors reported by polydg."""


class MeshError(PolyDGError, ValueError):
    """A mesh file or mesh array is unreadable, inconsistent or degenerate.

    The message names the source (file or generator), and the offending cell,
    facet or point where there is one.
    """


class ProblemError(PolyDGError, ValueError):
    """A problem definition does not load or a coefficient misbehaves."""


class OptionError(PolyDGError, ValueError):
    """An option has an unknown or out-of-range value."""
