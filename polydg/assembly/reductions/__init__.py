"""The reductions: how the blocks of an assembly become its matrix, one registered entry per ``approach``.

=============  ==============================================================  =============  ========
``approach``   how the blocks reach the matrix                                  deterministic  devices
=============  ==============================================================  =============  ========
``"2"``        row kernels: each element writes its rows' blocks once, at      yes            cpu, gpu
               their CSR positions (``rows.py``)
``"atomic"``   the paper's Approach 2 as published: every sub-simplex and      no (GPU)       cpu, gpu
               face block scatter-added into the pattern (``atomic.py``)
``"1"``        Approach 1, the baseline: COO triplets with duplicates, then    yes            cpu
               SciPy's conversion to CSR (``coo.py``)
``"ordered"``  on a GPU a thread per entity writes its blocks, then a thread   yes            cpu, gpu
               per entry sums them per element in a fixed order (on the CPU
               the row kernels; ``ordered.py``)
``"blocks"``   on a GPU a thread block per element, a thread per entry of its   yes            cpu, gpu
               rows, summing in the row kernels' order (on the CPU the row
               kernels; ``blocks.py``)
=============  ==============================================================  =============  ========

An entry (:class:`Reduction`, ``registry.py``) names its CPU executor and
its GPU executor (None where it has none) and says what the assembler must
know of it; the assembler looks it up once (:func:`reduction`) and hands it
the plan (:meth:`Reduction.execute`).  An executor is made with the pass
context of its device, ``executor(ctx)`` (``passes.PassContext`` or
``cuda_passes.DeviceContext``), and runs its kernels on the points and
coefficients that the shared passes prepare (``passes.py`` says how).

A new kernel strategy (a GPU one, say) is one new module here: its
executors, its entry, and a call to :func:`register`; the package imports
its modules below, so every entry is registered once this package is.
"""

from __future__ import annotations

from .registry import LOAD_ALONE, REDUCTIONS, Reduction, gpu_reductions, reduction, register

from . import rows, atomic, coo, ordered, blocks  # noqa: E402,F401,I001  (each registers its entry; "2" first: "auto"'s on the CPU)

__all__ = ["LOAD_ALONE", "REDUCTIONS", "Reduction", "gpu_reductions", "reduction", "register"]
