"""Assembly of the IP-dG matrix and load vector (DESIGN.md section 5)."""

from .assembler import AssemblyResult, assemble
from .workspace import Workspace

__all__ = ["assemble", "AssemblyResult", "Workspace"]
