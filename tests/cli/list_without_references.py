#!/usr/bin/python3
"""Every *_cases.py lists its cases with the test references (torch, sentencepiece, pandas,
matplotlib) unimportable, as on a machine set up by `bash jobs/quickstart.sh run`, which
configures the tests (cmake runs `--list`) but installs only h5py and matplotlib: a reference
imported at the top of a cases file broke that configure step."""
import glob
import os
import subprocess
import sys

HIDE = ["torch", "sentencepiece", "pandas", "matplotlib"]
# sys.modules[name] = None makes `import name` raise ImportError, as if not installed.
RUN_HIDDEN = ("import runpy, sys\n"
              "for m in sys.argv[2:]: sys.modules[m] = None\n"
              "path = sys.argv[1]; sys.argv = [path, '--list']\n"
              "runpy.run_path(path, run_name='__main__')\n")

here = os.path.dirname(os.path.abspath(__file__))
failed = []
for path in sorted(glob.glob(os.path.join(here, "*_cases.py"))):
    p = subprocess.run([sys.executable, "-c", RUN_HIDDEN, path, *HIDE], capture_output=True, text=True)
    names = p.stdout.strip().split(";") if p.stdout.strip() else []
    print(f"{os.path.basename(path)}: rc {p.returncode}, {len(names)} cases")
    if p.returncode != 0 or not names:
        failed.append(f"{os.path.basename(path)} --list without {', '.join(HIDE)}:\n{p.stderr.strip()}")
if failed:
    sys.exit("\n\n".join(failed))
