"""``main()``: the command line's entry (``python -m polydg.assemble``, the ``polydg-assemble`` script).

It parses the arguments, runs the job in this process (:mod:`.steady`) or on
the ranks ``mpiexec`` started (:mod:`.ranks`), and turns every input error
into one line on stderr and exit code 2.
"""

from __future__ import annotations

import sys

from ..backend import quiet_openmp_workers
from ..errors import CompilationWarning, OptionError, PolyDGError, PolyDGWarning, one_line
from .parser import build_parser


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code: 0 success, 2 bad input (one line on stderr), 1 internal error.

    polydg's warnings about the input (e.g. what meshio said about a mesh file
    it read nonetheless) are printed as one line each, and not at all with
    ``--quiet``.
    """
    import warnings

    argv = sys.argv[1:] if argv is None else argv
    quiet_openmp_workers()  # before the first parallel kernel (see its docstring)
    debug = "--debug" in argv
    quiet = "--quiet" in argv
    show_other_warnings = warnings.showwarning
    comm = None

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if not issubclass(category, PolyDGWarning):
            show_other_warnings(message, category, filename, lineno, file, line)
        elif not quiet and (comm is None or comm.Get_rank() == 0):
            print(f"polydg.assemble: warning: {one_line(message)}", file=sys.stderr)

    def report(message: str, exc: BaseException, code: int) -> int:
        """Print once (rank 0, or the failing rank when the others cannot know); end every rank."""
        from ..distributed.comm import RankFailure, abort

        known_everywhere = isinstance(exc, (RankFailure, OptionError))
        if comm is None or comm.Get_size() == 1:
            print(message, file=sys.stderr)
        elif known_everywhere:
            if comm.Get_rank() == 0:
                print(message, file=sys.stderr)
        else:  # the other ranks may wait for this one in a collective: end them all
            abort(comm, code, f"{message} (rank {comm.Get_rank()})")
        return code

    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            warnings.filterwarnings("ignore", category=CompilationWarning)  # the progress lines say it
            if any(a in ("-h", "--help") for a in argv):
                build_parser().print_help()
                return 0
            from ..distributed.comm import launched_ranks

            if launched_ranks() > 1:  # started by mpiexec with several ranks
                from ..distributed.comm import share_the_cores, world

                comm = world()
                share_the_cores(comm)
            else:
                from ..threads import use_environment_threads

                use_environment_threads()
            args = build_parser().parse_args(argv)
            quiet = args.quiet
            if comm is not None and comm.Get_size() > 1:
                from .inputs import Progress
                from .ranks import run_distributed

                run_distributed(args, comm, Progress(args.quiet))
            else:
                from .steady import run

                run(args)
        return 0
    except PolyDGError as exc:
        if debug:
            raise
        from ..distributed.comm import RankFailure

        code = 1 if isinstance(exc, RankFailure) and not exc.input_error else 2
        kind = "error" if code == 2 else "internal error"
        return report(f"polydg.assemble: {kind}: {one_line(exc)}", exc, code)
    except KeyboardInterrupt:
        print("polydg.assemble: interrupted", file=sys.stderr)
        return 130
    except MemoryError as exc:
        if debug:
            raise
        return report("polydg.assemble: error: out of memory (lower --memory-budget or the problem size)", exc, 1)
    except Exception as exc:  # an internal error: one line unless --debug
        if debug:
            raise
        msg = str(exc).splitlines()[0] if str(exc) else ""
        return report(f"polydg.assemble: internal error: {type(exc).__name__}: {msg} (run with --debug for the "
                      "traceback)", exc, 1)
