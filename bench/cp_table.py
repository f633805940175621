#!/usr/bin/python3
"""The table of a bench/cp_sweep.sh run: one row per configuration and sequence length,
medians over the steps after the first of tokens/s, MFU, exposed communication and its
split (waiting for a slower rank, which shared-memory ring hops tell, and transfer; "-" where
the exchanges cannot tell: MPI hops, Ulysses and all-gather collectives), attention imbalance (max / mean over ranks of attention
compute) and the ratio to the one-rank configuration of the same length.
    /usr/bin/python3 bench/cp_table.py OUTDIR_OR_RUNS_TAR
"""
import os
import re
import sys
import tarfile
import tempfile

import h5py
import numpy as np


def runs_in(path):
    """Run folders (name -> folder) of a sweep's OUTDIR, or of its runs.tar unpacked."""
    if not os.path.exists(path):
        sys.exit(f"cp_table: no such file or folder: {path} (give a cp_sweep.sh OUTDIR or its runs.tar)")
    if os.path.isfile(path):
        tmp = tempfile.mkdtemp(prefix="cp_table.")
        with tarfile.open(path) as t:
            t.extractall(tmp)
        path = tmp
    names = [n for n in os.listdir(path) if re.match(r"S\d+_", n) and os.path.isdir(os.path.join(path, n))]
    return {n: os.path.join(path, n) for n in names}


def row(folder):
    with h5py.File(os.path.join(folder, "timing.h5"), "r") as f:
        s = {k: f["steps"][k][()] for k in f["steps"]}
    tail = slice(1, None) if len(s["step"]) > 1 else slice(None)
    med = lambda v: float(np.median(v[tail]))  # noqa: E731
    attn = s["rank_attn_s"].reshape(len(s["step"]), -1)[tail]
    out = {"tps": med(s["tokens_per_s"]), "mfu": med(s["mfu"]), "ranks": attn.shape[1]}
    if attn.shape[1] > 1:
        comm, peer = s["exposed_comm_frac"], s.get("peer_wait_frac", np.zeros_like(s["exposed_comm_frac"]))
        out.update(comm=med(comm), imb=float(np.median(attn.max(1) / attn.mean(1))))
        if np.any(peer[tail] > 0):  # only shared-memory ring hops tell; elsewhere it stays 0
            out.update(peer=med(peer), transfer=med(comm - peer))
    return out


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    runs = runs_in(sys.argv[1])
    if not runs:
        sys.exit(f"cp_table: no S<len>_<config> run folders in {sys.argv[1]}")
    rows = {n: row(p) for n, p in sorted(runs.items(), key=lambda kv: (int(kv[0][1:].split("_")[0]), kv[0]))}
    print("| S | configuration | tokens/s | vs 1 rank | MFU | exposed comm | waiting for a slower rank | transfer | attention imbalance |")
    print("| ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for n, r in rows.items():
        S, config = n[1:].split("_", 1)
        base = [b for m, b in rows.items() if m.startswith(f"S{S}_") and b["ranks"] == 1]
        vs = f"{r['tps'] / base[0]['tps']:.2f}" if base else "-"
        pct = lambda k: f"{100 * r[k]:.2f}%" if k in r else "-"  # noqa: E731
        imb = f"{r['imb']:.3f}" if "imb" in r else "-"
        print(f"| {int(S):,} | {config.replace('_', ':')} | {r['tps']:,.1f} | {vs} | {100 * r['mfu']:.1f}% | "
              f"{pct('comm')} | {pct('peer')} | {pct('transfer')} | {imb} |")


if __name__ == "__main__":
    main()
