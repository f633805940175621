#!/usr/bin/python3
"""The documentation cannot rot silently: every relative link in README.md and docs/**/*.md
must name a file or folder that exists, and a link's #anchor a heading of the page it names;
README.md stays a front page of at most 300 lines.

A broken link fails with one line naming the file, the line number and the link:
    docs/training.md:12: broken link 'zero.md' (no such file: docs/zero.md)
Run by ctest as docs.links_resolve (python3, standard library only, no build needed):
    /usr/bin/python3 tests/docs/check_links.py SOURCE_DIR
"""
import os
import re
import sys

README_MAX_LINES = 300
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\[\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^\s*(```|~~~)")


def slug(heading):
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.strip().lower().replace("`", "").replace("*", "")
    text = re.sub(r"[^\w\- ]", "", text, flags=re.UNICODE)
    return text.replace(" ", "-")


def anchors(path, cache={}):
    if path not in cache:
        seen, found, fenced = {}, set(), False
        with open(path, encoding="utf-8") as f:
            for line in f:
                if FENCE.match(line):
                    fenced = not fenced
                    continue
                m = None if fenced else re.match(r"^#{1,6}\s+(.*?)\s*#*\s*$", line)
                if m:
                    base = slug(m.group(1))
                    n = seen.get(base, 0)
                    seen[base] = n + 1
                    found.add(base if n == 0 else f"{base}-{n}")
        cache[path] = found
    return cache[path]


def links(path):
    """(line number, target) of every link outside code blocks and code spans."""
    fenced = False
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if FENCE.match(line):
                fenced = not fenced
                continue
            if fenced:
                continue
            line = re.sub(r"(`+).*?\1", "", line)  # code spans
            for m in LINK.finditer(line):
                yield number, m.group(1)


def check(root, path):
    rel = os.path.relpath(path, root)
    problems = []
    for number, target in links(path):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, https:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = path if not file_part else os.path.normpath(os.path.join(os.path.dirname(path), file_part))
        where = os.path.relpath(dest, root)
        if file_part and (where == ".." or where.startswith(".." + os.sep)):
            problems.append(f"{rel}:{number}: broken link '{target}' (outside the repository: {where})")
        elif not os.path.exists(dest):
            problems.append(f"{rel}:{number}: broken link '{target}' (no such file: {where})")
        elif anchor and dest.endswith(".md") and os.path.isfile(dest) and anchor not in anchors(dest):
            problems.append(f"{rel}:{number}: broken link '{target}' (no heading '#{anchor}' in {where})")
    return problems


def main():
    root = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else
                           os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    readme = os.path.join(root, "README.md")
    pages = [readme]
    for folder, dirs, files in os.walk(os.path.join(root, "docs")):
        dirs.sort()
        pages += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".md")]
    problems = []
    for page in pages:
        problems += check(root, page)
    with open(readme, encoding="utf-8") as f:
        lines = sum(1 for _ in f)
    if lines > README_MAX_LINES:
        problems.append(f"README.md: {lines} lines, more than {README_MAX_LINES}: move detail to docs/")
    for p in problems:
        print(p)
    print(f"{len(pages)} pages, {sum(1 for p in pages for _ in links(p))} links, README.md {lines} lines: "
          + ("FAILED" if problems else "all links resolve"))
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
