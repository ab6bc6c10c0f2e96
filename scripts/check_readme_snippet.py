#!/usr/bin/env python3
"""Checks that a README code block is the text of an example file's marked regions.

Usage: check_readme_snippet.py README.md "## A taste" examples/taste.cpp

The first ```cpp block after the heading must equal the regions of the file between the lines
"// README: begin" and "// README: end", joined in order; "// clang-format off|on" lines inside a
region are not part of it. Exits 1 with a diff when they differ, so the README cannot rot.
"""
import difflib
import re
import sys


def readme_block(path, heading):
    text = open(path, encoding="utf-8").read()
    at = text.find("\n" + heading + "\n")
    if at < 0:
        sys.exit(f"{path}: no heading {heading!r}")
    m = re.compile(r"^```cpp\n(.*?)^```$", re.S | re.M).search(text, at)
    if not m:
        sys.exit(f"{path}: no ```cpp block after {heading!r}")
    return m.group(1).splitlines()


def example_regions(path):
    lines, inside, found = [], False, 0
    for n, line in enumerate(open(path, encoding="utf-8").read().splitlines(), 1):
        mark = line.strip()
        if mark == "// README: begin":
            if inside:
                sys.exit(f"{path}:{n}: begin inside a region")
            inside, found = True, found + 1
        elif mark == "// README: end":
            if not inside:
                sys.exit(f"{path}:{n}: end outside a region")
            inside = False
        elif inside and mark not in ("// clang-format off", "// clang-format on"):
            lines.append(line)
    if inside or not found:
        sys.exit(f"{path}: unterminated or no README region")
    return lines


def main():
    if len(sys.argv) != 4:
        sys.exit(__doc__)
    readme, heading, example = sys.argv[1:]
    want, have = readme_block(readme, heading), example_regions(example)
    if want == have:
        print(f"{readme} {heading!r} is {example}'s README regions ({len(have)} lines)")
        return 0
    sys.stdout.writelines(
        difflib.unified_diff([l + "\n" for l in want], [l + "\n" for l in have],
                             f"{readme} ({heading})", example))
    return 1


if __name__ == "__main__":
    sys.exit(main())
