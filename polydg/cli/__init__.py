"""The command line, ``python -m polydg.assemble``, one module per concern.

* :mod:`~polydg.cli.parser`: the arguments (``--help``);
* :mod:`~polydg.cli.inputs`: what they become: the run's options (with its
  one :class:`~polydg.assembly.AssemblyOptions`), the mesh and its degrees;
* :mod:`~polydg.cli.steady`: the one-process run;
* :mod:`~polydg.cli.ranks`: the run on the ranks ``mpiexec`` started;
* :mod:`~polydg.cli.spacetime`: the space-time run, slab after slab;
* :mod:`~polydg.cli.outputs`: ``--output DIR``, each rank's rows, the summary, the table;
* :mod:`~polydg.cli.targets`: where a run writes: checked first, written whole, never stale;
* :mod:`~polydg.cli.signals`: SIGINT, SIGTERM and SIGHUP end a run cleanly;
* :mod:`~polydg.cli.content`: what the output files hold beside the matrix (the solution, the
  pictures) and the run's compile figure;
* :mod:`~polydg.cli.progress`: the progress lines, and bars on a terminal;
* :mod:`~polydg.cli.main`: :func:`main`, exit codes and one-line errors.

The top of the house: it imports the library, and no library module imports it.
"""

from .main import main

__all__ = ["main"]
