#!/usr/bin/env python3
"""Summarise Meson test logs as one line: "tests: N passed, M failed[, K skipped]".

Usage: scripts/test_summary.py [--add-failed N] TESTLOG.json [TESTLOG.json ...]

Each TESTLOG is a meson-logs/testlog.json written by `meson test`: one JSON object per line,
whose "result" is OK, FAIL, SKIP, TIMEOUT, EXPECTEDFAIL, UNEXPECTEDPASS, ERROR (or, in newer
Meson versions, INTERRUPT). Several logs (say a normal and a sanitizer build) are added up.

  passed:  OK, EXPECTEDFAIL
  failed:  FAIL, TIMEOUT, UNEXPECTEDPASS, ERROR, INTERRUPT, and any result not known here
  skipped: SKIP

A log that is missing or unreadable counts as one failure (its test run did not complete), as
does each --add-failed (e.g. a build that failed before any test could run). A line that is not
valid JSON (a log cut short) is reported on stderr and ignored.

The end of each failing test's output (--tail lines of stdout and of stderr) goes to stderr.

Prints the summary line on stdout (the last line, for CI) and exits 1 when anything failed or
when no test ran at all (passed + failed == 0), else 0. Standard library only.
"""

import argparse
import json
import sys

PASSED = {"OK", "EXPECTEDFAIL"}
FAILED = {"FAIL", "TIMEOUT", "UNEXPECTEDPASS", "ERROR", "INTERRUPT"}
SKIPPED = {"SKIP"}


def warn(message: str) -> None:
    print(f"test_summary: {message}", file=sys.stderr)


def count(path: str, totals: dict) -> None:
    """Adds the results of one testlog.json to totals; names failing tests on stderr."""
    try:
        with open(path, encoding="utf-8", errors="replace") as log:
            lines = log.readlines()
    except OSError as err:
        warn(f"cannot read {path}: {err.strerror}; counted as 1 failure")
        totals["failed"] += 1
        return
    for number, line in enumerate(lines, 1):
        line = line.strip()
        if not line:
            continue
        try:
            entry = json.loads(line)
        except json.JSONDecodeError:
            warn(f"{path}:{number}: not a JSON object, ignored")
            continue
        if not isinstance(entry, dict):
            warn(f"{path}:{number}: not a JSON object, ignored")
            continue
        result = str(entry.get("result", "")).upper()
        name = entry.get("name", "?")
        if result in PASSED:
            totals["passed"] += 1
        elif result in SKIPPED:
            totals["skipped"] += 1
        else:
            if result not in FAILED:
                warn(f"{path}:{number}: unknown result {result!r} of {name!r}, counted as failed")
            warn(f"{result or 'NO RESULT'}: {name} ({path})")
            totals["failed"] += 1
            totals["failures"].append(entry)


def show_failure(entry: dict, lines: int) -> None:
    """Prints the end of a failing test's output on stderr: CI keeps the log, not the build dir."""
    if lines <= 0:
        return
    for stream in ("stdout", "stderr"):
        text = str(entry.get(stream) or "").rstrip("\n")
        if not text:
            continue
        tail = text.split("\n")[-lines:]
        warn(f"--- {entry.get('name', '?')}: last {len(tail)} lines of its {stream} ---")
        for line in tail:
            print(f"  {line}", file=sys.stderr)


def main(argv: list) -> int:
    parser = argparse.ArgumentParser(
        description='Print "tests: N passed, M failed[, K skipped]" for Meson testlog.json files.'
    )
    parser.add_argument("testlogs", nargs="+", metavar="TESTLOG", help="meson-logs/testlog.json")
    parser.add_argument(
        "--add-failed",
        type=int,
        default=0,
        metavar="N",
        help="count N more failures (e.g. builds that failed before their tests ran)",
    )
    parser.add_argument(
        "--tail",
        type=int,
        default=40,
        metavar="N",
        help="print the last N lines of each failing test's stdout and stderr (0: none)",
    )
    args = parser.parse_args(argv)

    totals = {"passed": 0, "failed": max(args.add_failed, 0), "skipped": 0, "failures": []}
    for path in args.testlogs:
        count(path, totals)
    for entry in totals["failures"]:
        show_failure(entry, args.tail)

    summary = f"tests: {totals['passed']} passed, {totals['failed']} failed"
    if totals["skipped"]:
        summary += f", {totals['skipped']} skipped"
    if totals["passed"] + totals["failed"] == 0:
        warn("no test ran")
    sys.stdout.flush()
    sys.stderr.flush()
    print(summary, flush=True)
    return 1 if totals["failed"] or totals["passed"] == 0 else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
