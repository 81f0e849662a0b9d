"""The command line, slowed down at one moment of its work, so that a test can signal it there.

Run as ``python fault_harness.py ARGS...`` (or under ``mpiexec``) with

* ``POLYDG_TEST_MOMENT``: ``staging`` (two files of ``--output`` written into
  the staging folder), ``commit`` (between two renames of the publication),
  ``after`` (the output published, the run not over), ``end`` (the run over:
  main() has returned; the process signals itself and exits with main's code);
* ``POLYDG_TEST_MARK``: a file that gets this process's pid when the moment is reached;
* ``POLYDG_TEST_PAUSE``: seconds to wait there (default 30).

main() runs as the program does (no ``argv``: ``sys.argv`` is set).
"""

import os
import signal
import sys
import time

MOMENT = os.environ.get("POLYDG_TEST_MOMENT", "")
MARK = os.environ.get("POLYDG_TEST_MARK", "")
PAUSE = float(os.environ.get("POLYDG_TEST_PAUSE", "30"))


def reached() -> None:
    if MARK:
        with open(MARK + ".tmp", "w") as fh:
            fh.write(str(os.getpid()))
        os.replace(MARK + ".tmp", MARK)


def slow_down() -> None:
    """Patch the moment's step to wait there."""
    import polydg.cli.outputs as outputs
    import polydg.cli.targets as targets

    if MOMENT == "staging":
        files = outputs.output_files

        def slow_files(*args, **kwargs):
            out = files(*args, **kwargs)
            name, write = out[1]

            def slow(path, write=write):
                write(path)
                reached()
                time.sleep(PAUSE)
            out[1] = (name, slow)
            return out
        outputs.output_files = slow_files
    elif MOMENT == "commit":
        moved = []

        def slow_move(source, target):
            os.replace(source, target)
            moved.append(target)
            if len(moved) == 2:
                reached()
                time.sleep(PAUSE)
        targets._move = slow_move
    elif MOMENT == "after":
        write = outputs.write_output

        def write_then_wait(*args, **kwargs):
            write(*args, **kwargs)
            reached()
            time.sleep(PAUSE)
        outputs.write_output = write_then_wait


def run() -> None:
    from polydg.cli import main

    slow_down()
    sys.argv = ["polydg.assemble", *sys.argv[1:]]
    code = main()
    if MOMENT == "end":  # a Ctrl-C just as the run ends: the interpreter's exit is not interrupted
        reached()
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.2)
    sys.exit(code)


if __name__ == "__main__":
    run()
