"""Assembly of the IP-dG matrix and load vector (docs/design.md §7).

``assemble(space, problem, options)``, or for many problems on one space
``Assembler(space, options).assemble(problem)`` (the plan kept): the user's choices are an
:class:`AssemblyOptions` (or its fields as keywords); the part of the system
and what a layer above fixes for it (the rows of one MPI rank, a slab's
penalty scales) an :class:`AssemblyScope`.
"""

from .assembler import Assembler, AssemblyResult, assemble
from .options import AssemblyOptions, default_options, reset_default_options, set_default_options
from .scope import AssemblyScope
from .workspace import Workspace

__all__ = ["assemble", "Assembler", "AssemblyOptions", "AssemblyResult", "AssemblyScope", "Workspace", "default_options",
           "reset_default_options", "set_default_options"]
