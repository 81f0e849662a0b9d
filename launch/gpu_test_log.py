"""A pytest plugin: one JSON line per test outcome, appended as the tests run (``launch/gpu_run.py``'s tests stage).

    POLYDG_TEST_LOG=tests.jsonl python -m pytest -p gpu_test_log ...     (launch/ on PYTHONPATH)

A run stopped at its time limit leaves the outcomes of the tests that
finished (JUnit XML is written only at the end).  Under pytest-xdist the
controller writes every worker's reports; the workers write nothing.
"""

from __future__ import annotations

import json
import os

_WRITER = {"path": None}


def pytest_configure(config):
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        _WRITER["path"] = os.environ.get("POLYDG_TEST_LOG") or None


def pytest_runtest_logreport(report):
    path = _WRITER["path"]
    if path is None:
        return
    if report.when != "call" and report.outcome == "passed":
        return  # setup and teardown that passed say nothing
    outcome = report.outcome
    if hasattr(report, "wasxfail"):
        outcome = "xfailed" if report.outcome == "skipped" else "xpassed"
    elif report.when != "call" and report.outcome == "failed":
        outcome = "error"
    message = ""
    if report.outcome == "skipped" and isinstance(report.longrepr, tuple):
        message = str(report.longrepr[2])
    elif report.outcome == "failed":
        lines = [ln for ln in report.longreprtext.splitlines() if ln.strip()]
        message = " | ".join(lines[-3:])[:600]
    line = {"nodeid": report.nodeid, "when": report.when, "outcome": outcome,
            "duration": round(float(report.duration), 3), "message": message}
    with open(path, "a") as fh:
        fh.write(json.dumps(line) + "\n")


def summarise(path) -> dict:
    """Counts of the outcomes in a log written by this plugin, and the failures and errors (one line each)."""
    counts = {"passed": 0, "failed": 0, "error": 0, "skipped": 0, "xfailed": 0, "xpassed": 0}
    failures, skips = {}, {}
    try:
        lines = open(path).read().splitlines()
    except OSError:
        lines = []
    for text in lines:
        try:
            rec = json.loads(text)
        except ValueError:
            continue  # a line cut short by a kill
        counts[rec["outcome"]] = counts.get(rec["outcome"], 0) + 1
        if rec["outcome"] in ("failed", "error"):
            failures[rec["nodeid"]] = rec["message"]
        elif rec["outcome"] == "skipped":
            skips[rec["message"]] = skips.get(rec["message"], 0) + 1
    counts["total"] = sum(counts.values())
    return {"counts": counts, "failures": failures, "skip_reasons": skips}
