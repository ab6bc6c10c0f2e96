#!/usr/bin/env python3
"""Checks the documentation: README.md, CONTRIBUTING.md, docs/*.md and adapters/*/README.md.

Usage: check_docs.py [ROOT]

- Every relative link names a file that exists, and its #anchor a heading of that file
  (GitHub's slugs).
- README.md has at most 250 lines and a docs/ page at most 400.
- No merge conflict marker is left in a page.
- Every ```cpp block is preceded by one of
    <!-- example: examples/NAME.cpp -->   the block is the regions of that file between the lines
                                          "// README: begin" and "// README: end", joined in
                                          order ("// clang-format off|on" inside left out); the
                                          build compiles and runs the file
    <!-- fragment -->                     a piece that does not compile alone
  so a block that compiles cannot drift from its file, and no block claims to compile silently.
Prints each problem as FILE:LINE: what, and exits 1 if there is any.
"""
import difflib
import pathlib
import re
import sys

LIMITS = {"README.md": 250}
PAGE_LIMIT = 400
CONFLICT = re.compile(r"^(<{7}|>{7}) |^={7}$")
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
MARK = re.compile(r"^<!-- (example: (\S+)|fragment) -->$")


def slug(heading):
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)  # GitHub keeps letters, digits, '_', '-' and spaces
    return s.replace(" ", "-")


def anchors(text):
    out, fence = set(), False
    for line in text.splitlines():
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            out.add(slug(line.lstrip("#")))
    return out


def example_regions(path):
    lines, inside, found = [], False, 0
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        mark = line.strip()
        if mark == "// README: begin":
            if inside:
                return None, f"{path}:{n}: begin inside a region"
            inside, found = True, found + 1
        elif mark == "// README: end":
            if not inside:
                return None, f"{path}:{n}: end outside a region"
            inside = False
        elif inside and mark not in ("// clang-format off", "// clang-format on"):
            lines.append(line)
    if inside or not found:
        return None, f"{path}: unterminated or no README region"
    return lines, None


def check(root, rel, problems):
    path = root / rel
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    limit = LIMITS.get(rel, PAGE_LIMIT if rel.startswith("docs/") else None)
    if limit is not None and len(lines) > limit:
        problems.append(f"{rel}:{len(lines)}: {len(lines)} lines, more than {limit}")
    for n, line in enumerate(lines, 1):
        if CONFLICT.match(line):
            problems.append(f"{rel}:{n}: a merge conflict marker")
    fence, block, start, mark = None, [], 0, None
    for n, line in enumerate(lines, 1):
        if fence is None:
            if line.startswith("```"):
                fence, block, start = line[3:].strip(), [], n
                prev = next((l for l in reversed(lines[: n - 1]) if l.strip()), "")
                mark = MARK.match(prev.strip())
                continue
            for target in LINK.findall(line):
                if re.match(r"^[a-z]+:", target):
                    continue  # https:, mailto:
                file, _, anchor = target.partition("#")
                dest = (path.parent / file).resolve() if file else path
                if not dest.exists():
                    problems.append(f"{rel}:{n}: link to {target}: no such file")
                elif anchor and dest.suffix == ".md" and anchor not in anchors(
                        dest.read_text(encoding="utf-8")):
                    problems.append(f"{rel}:{n}: link to {target}: no such heading")
        elif line.startswith("```"):
            if fence == "cpp":
                check_block(root, rel, start, mark, block, problems)
            fence = None
        else:
            block.append(line)


def check_block(root, rel, start, mark, block, problems):
    if not mark:
        problems.append(f"{rel}:{start}: a cpp block with neither <!-- example: FILE --> nor "
                        "<!-- fragment --> before it")
        return
    if not mark.group(2):
        return  # a fragment
    example = root / mark.group(2)
    if not example.exists():
        problems.append(f"{rel}:{start}: example {mark.group(2)}: no such file")
        return
    want, error = example_regions(example)
    if error:
        problems.append(error)
    elif want != block:
        diff = "".join(difflib.unified_diff([l + "\n" for l in block], [l + "\n" for l in want],
                                            f"{rel}:{start}", mark.group(2)))
        problems.append(f"{rel}:{start}: the block is not {mark.group(2)}'s regions:\n{diff}")


def check_versions(root, problems):
    """The version is meson.build's; debian/changelog's top entry and CHANGELOG.md's top heading
    say the same, and that entry names each dialect's newest migration (sql/<dialect>/NNNN_*)."""
    meson = re.search(r"^\s*version:\s*'([^']+)'", (root / "meson.build").read_text(), re.M)
    if not meson:
        problems.append("meson.build: no version: '...' in project()")
        return
    version = meson.group(1)
    debian = (root / "debian" / "changelog").read_text().split("\n", 1)[0]
    if not debian.startswith(f"outbox ({version})"):
        problems.append(f"debian/changelog: the top entry is not version {version}: {debian}")
    text = (root / "CHANGELOG.md").read_text()
    entries = re.split(r"^## ", text, flags=re.M)
    top = entries[1] if len(entries) > 1 else ""
    if not top.startswith(version + "\n"):
        problems.append(f"CHANGELOG.md: the top heading is not '## {version}'")
    names = {"postgresql": "PostgreSQL", "mysql": "MySQL", "sqlite": "SQLite"}
    for dialect, name in names.items():
        numbers = [int(p.name[:4]) for p in (root / "sql" / dialect).glob("[0-9][0-9][0-9][0-9]_*.sql")]
        # \b: "migration 1" must not pass for a top entry naming "migration 10" only.
        if numbers and not re.search(rf"\b{name} migration {max(numbers)}\b", " ".join(top.split())):
            problems.append(f"CHANGELOG.md: the top entry does not name '{name} migration "
                            f"{max(numbers)}' (sql/{dialect}/'s newest)")


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    files = ["README.md", "CONTRIBUTING.md"]
    files += sorted(str(p.relative_to(root)) for p in (root / "docs").glob("*.md"))
    files += sorted(str(p.relative_to(root)) for p in (root / "adapters").glob("*/README.md"))
    files.append("CHANGELOG.md")
    problems = []
    for rel in files:
        check(root, rel, problems)
    check_versions(root, problems)
    for p in problems:
        print(p)
    print(f"check_docs: {len(files)} files, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
