#!/usr/bin/python3
"""Plots lctrain timing tables (h5py -> PNG).

  /usr/bin/python3 bench/plot_timing.py RUN/timing.h5 [MORE/timing.h5 ...] --out plots/

For each table: loss vs tokens, tokens/s and MFU vs step, the stacked time breakdown per
step, and exposed communication and busy time per rank. With several tables (a sweep, e.g.
jobs/sweep.sbatch): scaling efficiency vs cp at each sequence length, where efficiency =
tokens/s(cp) / (cp x tokens/s(cp = 1)) for the same dp and sequence length.

Steps repeated after a restart (rows of a run that was stopped and resumed from an earlier
checkpoint) are reduced to the last run's row of each step.
Needs python3-h5py and python3-matplotlib (Debian).
"""
import argparse
import os
import sys

import h5py
import numpy as np

import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["attn_fwd_s", "attn_bwd_s", "gemm_s", "other_s", "optimizer_s", "io_s", "comm_s",
          "allreduce_s"]


def load(path):
    """Columns of the table, one row per step (the last row written for each step)."""
    with h5py.File(path, "r") as f:
        cols = {k: f["steps"][k][:] for k in f["steps"]}
        attrs = {k: f.attrs[k] for k in f.attrs}
        config = dict(f["provenance/config"].attrs) if "provenance/config" in f else {}
    steps = cols["step"].astype(int)
    last = {s: i for i, s in enumerate(steps)}  # later rows win
    keep = np.array([last[s] for s in sorted(last)])
    return {k: v[keep] for k, v in cols.items()}, attrs, config


def per_run_plots(path, out_dir):
    t, attrs, config = load(path)
    name = os.path.basename(os.path.dirname(os.path.abspath(path))) or "run"
    step = t["step"]
    fig, ax = plt.subplots(2, 2, figsize=(12, 8))
    fig.suptitle(f"{name}: dp={attrs.get('dp', '?')} cp={attrs.get('cp', '?')} "
                 f"seq_len={config.get('train.seq_len', '?')}")
    tokens = np.cumsum(t["tokens"])
    a = ax[0, 0]
    a.plot(tokens, t["loss"])
    a.set(xlabel="tokens trained", ylabel="loss (nats)", title="loss vs tokens", yscale="log")
    for r in np.unique(t["restart"])[1:]:  # where each restart took over
        a.axvline(tokens[np.argmax(t["restart"] >= r)], color="grey", ls=":", lw=1)
    a = ax[0, 1]
    a.plot(step, t["tokens_per_s"], label="tokens/s")
    a.set(xlabel="step", ylabel="tokens/s", title="throughput and MFU")
    b = a.twinx()
    b.plot(step, 100 * t["mfu"], color="C1", label="MFU")
    b.set_ylabel("MFU (%)")
    a = ax[1, 0]
    bottom = np.zeros(len(step))
    for p in PHASES:
        if p in t:
            a.bar(step, t[p], bottom=bottom, width=1.0, label=p[:-2])
            bottom += t[p]
    a.set(xlabel="step", ylabel="seconds (rank 0)", title="time per step")
    a.legend(fontsize=7, ncol=2)
    a = ax[1, 1]
    if "rank_seconds" in t and t["rank_seconds"].ndim == 2:
        secs, comm = t["rank_seconds"], t["rank_comm_s"]
        busy = secs - comm - t["rank_allreduce_s"]
        ranks = np.arange(secs.shape[1])
        a.bar(ranks - 0.2, 100 * np.median(comm / secs, axis=0), 0.4, label="exposed comm (%)")
        a.bar(ranks + 0.2, 100 * np.median(busy, axis=0) / np.median(busy.mean(axis=1)), 0.4,
              label="busy time (% of mean)")
        a.set(xlabel="rank", title=f"per rank (median); imbalance {np.median(t['imbalance']):.3f}",
              xticks=ranks)
        a.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(out_dir, f"{name}.png")
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def scaling_plot(paths, out_dir):
    rows = []
    for p in paths:
        t, attrs, config = load(p)
        tps = np.median(t["tokens_per_s"][1:] if len(t["tokens_per_s"]) > 1 else t["tokens_per_s"])
        rows.append((int(attrs.get("cp", 1)), int(attrs.get("dp", 1)),
                     int(config.get("train.seq_len", 0)), tps))
    fig, a = plt.subplots(figsize=(6, 4))
    plotted = False
    for dp, seq in sorted({(r[1], r[2]) for r in rows}):
        pts = sorted((cp, tps) for cp, d, s, tps in rows if d == dp and s == seq)
        base = dict(pts).get(1)
        if base is None or len(pts) < 2:
            continue
        a.plot([c for c, _ in pts], [tps / (c * base) for c, tps in pts], "o-", label=f"S={seq} dp={dp}")
        plotted = True
    if not plotted:
        plt.close(fig)
        return None
    a.axhline(1.0, color="grey", ls=":")
    a.set(xlabel="cp (ranks per sequence)", ylabel="efficiency vs cp=1", title="context-parallel scaling")
    a.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(out_dir, "scaling_vs_cp.png")
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", help="timing.h5 files (lctrain train)")
    ap.add_argument("--out", default="plots", help="directory for the PNG files")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    for p in a.tables:
        print("wrote", per_run_plots(p, a.out))
    if len(a.tables) > 1:
        out = scaling_plot(a.tables, a.out)
        print("wrote", out) if out else print("no cp=1 baseline with a larger cp: no scaling plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
