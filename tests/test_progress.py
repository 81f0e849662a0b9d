"""The command line's progress: time-stamped lines, and on a terminal (rich) bars and spinners."""

from __future__ import annotations

import io

import pytest

from polydg.cli.progress import Progress, chunk_progress


def test_lines_without_a_terminal():
    out = io.StringIO()
    say = Progress(False, stream=out)  # a StringIO is no terminal: lines only
    assert not say.bars
    chunk_progress(say)("element kernel", 1, 3)
    chunk_progress(say)("element kernel", 1, 1)  # one chunk: no line
    with say.activity("solving (direct)"):
        say("solved")
    text = out.getvalue()
    assert "element kernel: chunk 1/3" in text and "solved" in text and "\x1b[" not in text
    assert text.count("\n") == 2 and text.startswith("[")


def test_many_chunks_without_a_terminal_say_a_few_lines():
    """A tiny memory budget's hundreds of chunks: the first and last chunk of each stage, and a line at most
    every CHUNK_LINE_SECONDS between, not one per chunk (a batch job's log)."""
    out = io.StringIO()
    say = Progress(False, stream=out)
    for stage in ("element kernel", "interior kernel"):
        for done in range(1, 501):
            say.chunks(stage, done, 500)
    lines = out.getvalue().splitlines()
    assert [line.split("] ")[1] for line in lines] == [
        "  element kernel: chunk 1/500", "  element kernel: chunk 500/500",
        "  interior kernel: chunk 1/500", "  interior kernel: chunk 500/500"]


def test_quiet_says_nothing_and_shows_no_bar():
    out = io.StringIO()
    say = Progress(True, stream=out, bars=True)
    assert not say.bars
    say.chunks("interior kernel", 2, 5)
    with say.activity("newton iteration"):
        say("newton 1: residual 1e-3")
    assert out.getvalue() == ""


def test_bars_on_a_terminal_show_the_chunks_and_the_activity():
    pytest.importorskip("rich")
    out = io.StringIO()
    say = Progress(False, stream=out, bars=True, delay=0.0)
    for done in range(1, 4):
        say.chunks("element kernel", done, 4)
    say._live[0].refresh()
    assert "assembly: element kernel" in out.getvalue() and "3/4" in out.getvalue()
    say("assembled 100 dofs")  # the next line ends the assembly's bar
    assert say._live is None and "assembled 100 dofs" in out.getvalue()
    with say.activity("solving (iterative)"):
        say._live[0].refresh()
        say("a line above the spinner")
    assert say._live is None
    text = out.getvalue()
    assert "solving (iterative)" in text and "a line above the spinner" in text


def test_a_bar_waits_before_it_shows():
    pytest.importorskip("rich")
    out = io.StringIO()
    say = Progress(False, stream=out, bars=True, delay=60.0)
    say.chunks("element kernel", 1, 4)
    say._live[0].refresh()
    assert "element kernel" not in out.getvalue()  # a short stage shows no bar
    say.close()
    assert say._live is None
