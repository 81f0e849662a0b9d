"""``main()``: the command line's entry (``python -m polydg.assemble``, the ``polydg-assemble`` script).

It parses the arguments, runs the job in this process (:mod:`.steady`) or on
the ranks ``mpiexec`` started (:mod:`.ranks`, under the ranks' watch,
:mod:`polydg.distributed.watch`), and ends every failure with one line on
stderr (from rank 0 alone) and its exit code: 2 bad input, 128 + signal for
an interrupt (130 for SIGINT, 143 for SIGTERM), 1 otherwise.
"""

from __future__ import annotations

import re
import sys

from ..backend import quiet_openmp_workers
from ..errors import CompilationWarning, Interrupted, PolyDGWarning, one_line
from .parser import build_parser
from .signals import SignalGuard, use

#: NumPy's floating-point warnings: a non-finite result they announce is refused in one line instead
_FLOATING_POINT = re.compile(r"(overflow|invalid value|divide by zero|underflow) encountered")


def failure_line(kind: str, code: int, text: str) -> str:
    """The one line of a failure of ``kind`` (see :func:`polydg.distributed.comm.describe`)."""
    if kind == "interrupt":
        return f"polydg.assemble: interrupted ({text})"
    if kind == "memory":
        return f"polydg.assemble: error: {text} (a smaller problem; in the assembly, a lower --memory-budget)"
    if kind == "internal":
        return f"polydg.assemble: internal error: {text} (run with --debug for the traceback)"
    return f"polydg.assemble: error: {text}"


def main(argv: list[str] | None = None) -> int:
    """Run the command line; returns the exit code: 0 success, 2 bad input (one line on stderr), 1 internal
    error, 128 + signal when interrupted.

    polydg's warnings about the input (e.g. what meshio said about a mesh file
    it read nonetheless) are printed as one line each, and not at all with
    ``--quiet``.  Called without ``argv`` (as the program), SIGINT and
    SIGTERM are ignored once the run is over.
    """
    import warnings

    from ..distributed.comm import RankFailure, describe

    as_program = argv is None
    argv = sys.argv[1:] if argv is None else argv
    quiet_openmp_workers()  # before the first parallel kernel (see its docstring)
    debug = "--debug" in argv
    quiet = "--quiet" in argv
    show_other_warnings = warnings.showwarning
    comm = watch = None
    guard = SignalGuard().install()
    show_unraisable = sys.unraisablehook

    def show_warning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, RuntimeWarning) and _FLOATING_POINT.search(str(message)):
            return
        if not issubclass(category, PolyDGWarning):
            show_other_warnings(message, category, filename, lineno, file, line)
        elif not quiet and (comm is None or comm.Get_rank() == 0):
            print(f"polydg.assemble: warning: {one_line(message)}", file=sys.stderr)

    def unraisable(info):  # after an interrupt, what the interrupted code could not clean up is no news
        if not guard.note_unraisable(info) and guard.received is None:
            show_unraisable(info)

    def failed(error: BaseException) -> int:
        """One line (rank 0's), the exit code; on several ranks, end them all if they cannot know."""
        if guard.received is not None and not isinstance(error, (KeyboardInterrupt, RankFailure)):
            error = Interrupted(guard.received)  # e.g. Numba's errors of a compilation cut short
        kind, code, text = describe(error)
        line = failure_line(kind, code, text)
        if comm is None or comm.Get_size() == 1:
            print(line, file=sys.stderr)
            return code
        if watch is None:  # before the watch: an option error, the same on every rank
            if comm.Get_rank() == 0:
                print(line, file=sys.stderr)
            return code
        if watch.ending is not None:  # the watch is ending the job already (another rank failed)
            watch.finish(*watch.ending)
        if isinstance(error, RankFailure):  # known to every rank: each returns, rank 0 says it
            if comm.Get_rank() == 0:
                watch.announce(line)
            return code
        watch.fail(error)  # the others may wait in a collective: rank 0 says it and ends them all

    sys.unraisablehook = unraisable
    code = 1
    try:
        with warnings.catch_warnings():
            warnings.showwarning = show_warning
            warnings.filterwarnings("ignore", category=CompilationWarning)  # the progress lines say it
            try:
                if any(a in ("-h", "--help") for a in argv):
                    build_parser().print_help()
                    code = 0
                    return code
                from ..distributed.comm import launched_ranks

                if launched_ranks() > 1:  # started by mpiexec with several ranks
                    from ..distributed.comm import share_the_cores, world

                    comm = world()
                    share_the_cores(comm)
                else:
                    from ..threads import use_environment_threads

                    use_environment_threads()
                args = build_parser().parse_args(argv)
                args.argv = [str(a) for a in argv]  # the run's own words, for its summary
                quiet = args.quiet
                from .outputs import summary_on_stdout
                if comm is not None and comm.Get_size() > 1:
                    from ..distributed.watch import GuardedComm, RankWatch
                    from .inputs import Progress
                    from .ranks import run_distributed

                    watch = RankWatch(comm, args.timeout, line=failure_line).start()
                    use(guard, watch)
                    with summary_on_stdout(args):
                        run_distributed(args, GuardedComm(comm, watch), Progress(args.quiet))
                else:
                    use(guard)
                    from .steady import run

                    with summary_on_stdout(args):
                        run(args)
                code = 0
            except BaseException as error:
                if debug:  # the traceback, then the one line and its exit code as without --debug
                    import traceback

                    traceback.print_exc()
                code = failed(error)
        return code
    finally:
        use(None)
        if watch is not None:
            watch.stop()
        if as_program:  # the run is over: the interpreter's exit must not be interrupted
            guard.ignore()
        else:
            guard.restore()
            sys.unraisablehook = show_unraisable
