#!/usr/bin/python3
"""docs/cli-reference.md is what `lctrain --cli-reference` prints from the option
declarations: fails, naming the first line that differs and the command that regenerates the
page, when an option was added, removed or changed without the page.

    /usr/bin/python3 tests/docs/check_cli_reference.py LCTRAIN SOURCE_DIR
"""
import os
import subprocess
import sys


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    lctrain, root = sys.argv[1], sys.argv[2]
    page = os.path.join(root, "docs", "cli-reference.md")
    p = subprocess.run([lctrain, "--cli-reference"], capture_output=True, text=True, timeout=60)
    if p.returncode != 0:
        sys.exit(f"lctrain --cli-reference exited {p.returncode}: {p.stderr.strip()}")
    want = p.stdout.splitlines()
    with open(page, encoding="utf-8") as f:
        have = f.read().splitlines()
    for i, (a, b) in enumerate(zip(have, want)):
        if a != b:
            sys.exit(f"{page}:{i + 1} differs from the option declarations:\n  page:    {a}\n  lctrain: {b}\n"
                     f"regenerate it: {lctrain} --cli-reference > docs/cli-reference.md")
    if len(have) != len(want):
        sys.exit(f"{page} has {len(have)} lines, lctrain --cli-reference {len(want)}; "
                 f"regenerate it: {lctrain} --cli-reference > docs/cli-reference.md")
    print(f"{page}: {len(have)} lines, the same as lctrain --cli-reference")


if __name__ == "__main__":
    main()
