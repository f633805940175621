#!/usr/bin/python3
"""Medians of paired runs, as bench/mpi_compare.sh and bench/before_after.sh leave them: run
folders W/r<round>_<which>_<layout> with their logs W/r<round>_<which>_<layout>.out. Prints
one line per run, then per layout the medians of B against A: tokens/s (over the steps after
the first) and the slowest checkpoint of each run.

    /usr/bin/python3 bench/pair_table.py W A B "A's label" "B's label"
"""
import glob
import os
import re
import statistics as st
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cp_table import row  # noqa: E402  medians over the steps after the first


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    w, a, b, label_a, label_b = sys.argv[1:]
    res, layouts = {}, []
    for out in sorted(glob.glob(f"{w}/r*_*.out")):
        name = os.path.basename(out)[:-4]
        _, which, layout = name.split("_")
        ck = [float(s) for s in re.findall(r"checkpoint \S+: [\d.]+ \S+ in ([\d.]+) s", open(out).read())]
        r = row(out[:-4])
        res.setdefault((which, layout), []).append((r["tps"], max(ck) if ck else float("nan")))
        if layout not in layouts:
            layouts.append(layout)
        print(f"{name}: {r['tps']:,.0f} tokens/s, exposed comm {100 * r.get('comm', 0):.1f}%, "
              f"slowest checkpoint {max(ck) if ck else float('nan'):.3f} s")
    print(f"| layout | {label_a} tokens/s | {label_b} tokens/s | {label_b} / {label_a} | {label_a} checkpoint "
          f"| {label_b} checkpoint | ratio |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for layout in layouts:
        x, y = res[(a, layout)], res[(b, layout)]
        tx, ty = st.median(v[0] for v in x), st.median(v[0] for v in y)
        cx, cy = st.median(v[1] for v in x), st.median(v[1] for v in y)
        print(f"| {layout} | {tx:,.0f} | {ty:,.0f} | {ty / tx:.3f} | {cx:.3f} s | {cy:.3f} s | {cy / cx:.2f} |")


if __name__ == "__main__":
    main()
