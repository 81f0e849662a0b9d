"""README.md stays a short user's guide, and CI runs exactly its test command."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
CI = ROOT / ".ci" / "run"

#: the README is a guide; measurements go to docs/performance.md
MAX_README_LINES = 300


def fenced_commands(text: str) -> list[str]:
    """The lines of every ```sh / ```bash / ```console block, continuation lines joined."""
    commands = []
    for body in re.findall(r"^```(?:sh|bash|shell|console)[ \t]*\n(.*?)^```", text, re.M | re.S):
        for line in body.replace("\\\n", " ").splitlines():
            line = line.strip()
            if line and not line.startswith("#"):
                commands.append(line.removeprefix("$ "))
    return commands


def readme_test_command() -> str:
    found = [c for c in fenced_commands(README.read_text()) if re.search(r"\bpytest\b", c)]
    assert len(found) == 1, f"README.md should have exactly one fenced command that runs pytest, found {found}"
    return found[0]


def test_ci_runs_the_readme_test_command():
    command = readme_test_command()
    ci_lines = [line.strip() for line in CI.read_text().splitlines()]
    assert command in ci_lines, f".ci/run does not run the README's test command {command!r} as one of its lines"


def test_readme_is_short():
    lines = README.read_text().count("\n")
    assert lines <= MAX_README_LINES, f"README.md has {lines} lines (at most {MAX_README_LINES}: figures go to docs/)"


def test_fenced_commands_are_found():
    text = "intro\n```sh\npython -m pip install -q -e \".[test]\" && python -m pytest -q\n```\n"
    assert fenced_commands(text) == ['python -m pip install -q -e ".[test]" && python -m pytest -q']
