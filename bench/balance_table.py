#!/usr/bin/python3
"""The table of bench/balance.sh from the runs it leaves (W/<mix>_<none|cost>_r<round>/timing.h5):
per mix and placement, the medians over the rounds of each run's throughput (its tokens / its
seconds over the steps after the first: a median of per-step tokens/s would weigh a step of
short documents like one of long ones), measured imbalance (max/mean busy time), the imbalance
the documents predict, the one the same tokens would have had under --balance none, and
exposed communication (each the median over the run's steps).

    /usr/bin/python3 bench/balance_table.py W MIX [MIX ...]
"""
import glob, statistics as st, sys
import h5py
import numpy as np
if len(sys.argv) < 3:
    sys.exit(__doc__)
w, mixes = sys.argv[1], sys.argv[2:]
print("| mix | --balance | tokens/s | imbalance | predicted | under none | exposed comm |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for mix in mixes:
    tps = {}
    for b in ("none", "cost"):
        rows = []
        for run in sorted(glob.glob(f"{w}/{mix}_{b}_r*/timing.h5")):
            with h5py.File(run, "r") as f:
                c = {k: f["steps"][k][1:] for k in ("tokens", "seconds", "imbalance", "predicted_imbalance",
                                                   "unbalanced_imbalance", "exposed_comm_frac")}
            under = c["unbalanced_imbalance"] if not np.isnan(c["unbalanced_imbalance"]).all() else c["predicted_imbalance"]
            rows.append((c["tokens"].sum() / c["seconds"].sum(), np.median(c["imbalance"]),
                         np.median(c["predicted_imbalance"]), np.median(under), 100 * np.median(c["exposed_comm_frac"])))
        med = [st.median(r[i] for r in rows) for i in range(5)]
        tps[b] = med[0]
        print(f"| {mix} | {b} | {med[0]:,.0f} | {med[1]:.3f} | {med[2]:.3f} | {med[3]:.3f} | {med[4]:.1f}% |")
    print(f"| {mix} | cost / none | {tps['cost'] / tps['none']:.3f}x | | | | |")
