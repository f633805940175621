#!/usr/bin/python3
"""The table of bench/plan_sweep.sh: each planned layout's predicted step time and memory per
rank against the measured ones (median step after the first with the checkpoint's write left
out; rank 0's peak resident memory over the steps).
    /usr/bin/python3 bench/plan_table.py OUTDIR|runs.tar
"""
import io
import math
import os
import re
import sys
import tarfile

import h5py
import numpy as np

ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s.* (\d+) rank\(s\)/node x --threads (\d+): train (.*)$")


def files(src):
    """name -> bytes of plan.out and every runN/timing.h5, from a directory or the tar."""
    if os.path.isdir(src):
        out = {"plan.out": open(os.path.join(src, "plan.out"), "rb").read()}
        for d in os.listdir(src):
            t = os.path.join(src, d, "timing.h5")
            if os.path.exists(t):
                out[f"{d}/timing.h5"] = open(t, "rb").read()
        return out
    with tarfile.open(src) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def secs(v):
    """Seconds as `lctrain plan` prints them: two decimals, two significant digits below 1 s."""
    return f"{v:.{min(6, max(2, 1 - math.floor(math.log10(v))))}f}" if 0 < v < 1 else f"{v:.2f}"


def main(src):
    f = files(src)
    plan = f["plan.out"].decode()
    for line in plan.splitlines():
        if line.startswith(("fp32 on", "bf16 on", "links", "plan:")):
            print(line)
    print()
    print("| # | layout | predicted step | measured step | measured / predicted | predicted memory/rank | peak RSS rank 0 |")
    print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
    for m in filter(None, map(ROW.match, plan.splitlines())):
        n, ranks, threads, flags = m.group(1), m.group(5), m.group(6), m.group(7)
        pred_s, pred_gib = float(m.group(2)), float(m.group(4))
        key = f"run{n}/timing.h5"
        if key not in f:
            print(f"| {n} | {ranks} x {threads}: {flags} | {pred_s:.2f} s | did not run | | {pred_gib:.2f} GiB | |")
            continue
        with h5py.File(io.BytesIO(f[key]), "r") as h:
            s = h["steps"]
            step = float(np.median((s["seconds"][:] - s["io_s"][:])[1:]))  # the checkpoint's write is no step's work
            rss = float(np.max(s["peak_rss_mib"][:])) / 1024
        ratio = f"{step / pred_s:.2f}" if pred_s > 0 else "-"  # a plan printed before seconds kept 2 digits
        print(f"| {n} | {ranks} x {threads}: {flags} | {secs(pred_s)} s | {secs(step)} s | {ratio} | "
              f"{pred_gib:.2f} GiB | {rss:.2f} GiB |")


if __name__ == "__main__":
    main(sys.argv[1])
