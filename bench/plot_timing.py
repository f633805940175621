#!/usr/bin/python3
"""Plots lctrain timing tables (h5py -> PNG).

  /usr/bin/python3 bench/plot_timing.py RUN/timing.h5 [MORE/timing.h5 ...] --out plots/

For each table, one PNG of eight panels: loss vs tokens (restarts marked), the stacked time
breakdown per step, tokens/s, MFU, learning rate and gradient norm (skipped steps marked)
vs step, and per rank the exposed communication and the busy time over the mean of the
ranks (the imbalance), each axis scaled to its data. A run with train --eval-every gets two
more: the held-out loss (with the training loss) and the held-out next-token accuracy and
passkey retrieval vs step. With several tables (a sweep, e.g.
jobs/sweep.sbatch): scaling efficiency vs cp at each sequence length, where efficiency =
tokens/s(cp) / (cp x tokens/s(cp = 1)) for the same dp and sequence length.

A PNG is named after its table's folder relative to the folder all the tables share
(sweep/cp2/run/timing.h5 and sweep/cp4/run/timing.h5 -> cp2_run.png and cp4_run.png), so
tables in folders of the same name do not overwrite each other. A RUN folder may be given
for RUN/timing.h5. Steps repeated after a restart (rows of a run that was stopped and resumed
from an earlier checkpoint) are reduced to the last run's row of each step.
Needs python3-h5py and python3-matplotlib (Debian).
"""
import argparse
import os
import sys

import h5py
import numpy as np

import matplotlib
import matplotlib.ticker
matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PHASES = ["attn_fwd_s", "attn_bwd_s", "gemm_s", "other_s", "optimizer_s", "io_s", "comm_s",
          "allreduce_s"]


class TableError(Exception):
    """A table that cannot be plotted: one line for the user, no traceback."""


def table_path(arg):
    """The timing table an argument names: the file, or RUN/timing.h5 for a folder."""
    path = os.path.join(arg, "timing.h5") if os.path.isdir(arg) else arg
    if not os.path.exists(path):
        raise TableError(f"'{path}' does not exist" + ("" if os.path.isdir(arg) else
                         " (give RUN/timing.h5 or a run folder that holds one)"))
    return path


def load(path):
    """Columns of the table, one row per step (the last row written for each step).

    Step columns are [steps]; per-rank columns (rank_*) are [steps, ranks], also when an
    older lctrain wrote a one-rank table's as [steps]."""
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get("lctrain_file", "")
            if kind != "timing":
                raise TableError(f"'{path}' is not a training run's timing table "
                                 f"(lctrain_file = '{kind}')")
            cols = {k: f["steps"][k][:] for k in f["steps"]}
            attrs = {k: f.attrs[k] for k in f.attrs}
            config = dict(f["provenance/config"].attrs) if "provenance/config" in f else {}
    except OSError as e:
        raise TableError(f"'{path}' cannot be read as HDF5: {e}") from None
    if "step" not in cols or len(cols["step"]) == 0:
        raise TableError(f"'{path}' holds no steps yet")
    cols = {k: v[:, None] if k.startswith("rank_") and v.ndim == 1 else v for k, v in cols.items()}
    last = {s: i for i, s in enumerate(cols["step"].astype(int))}  # later rows win
    keep = np.array([last[s] for s in sorted(last)])
    return {k: v[keep] for k, v in cols.items()}, attrs, config


def degrees(t, attrs, config):
    """(dp, cp): the summary's, or for a run stopped before its end (no summary yet) the
    options' and the rank count's."""
    cp = int(attrs.get("cp", config.get("train.cp", 1)))
    ranks = t["rank_seconds"].shape[1] if "rank_seconds" in t else cp
    dp = int(attrs.get("dp", config.get("train.dp", 0))) or max(1, ranks // cp)
    return dp, cp


def plot_names(paths):
    """A distinct PNG name per table: its folder relative to the folder all share."""
    dirs = [os.path.dirname(os.path.abspath(p)) for p in paths]
    common = os.path.commonpath(dirs) if len(dirs) > 1 else os.path.dirname(dirs[0])
    names, seen = [], {}
    for p, d in zip(paths, dirs):
        parts = [x for x in os.path.relpath(d, common).split(os.sep) if x not in (".", "")]
        stem = os.path.splitext(os.path.basename(p))[0]
        if stem != "timing":
            parts.append(stem)
        name = "_".join(parts) or os.path.basename(d) or "run"
        seen[name] = seen.get(name, 0) + 1
        names.append(name if seen[name] == 1 else f"{name}_{seen[name]}")
    return names


def line_panel(a, x, y, label, title, xlabel="step", **kw):
    a.plot(x, y, label=label, **kw)
    a.set(xlabel=xlabel, title=title)
    a.legend(fontsize=7, loc="best")


def loss_panel(a, t):
    tokens = np.cumsum(t["tokens"])
    a.plot(tokens, t["loss"], label="loss (nats)")
    a.set(xlabel="tokens trained", title="loss vs tokens", yscale="log")
    # Ticks at 1, 2, 3, 5 x 10^k labelled 0.3 and 4, not 3x10^-1: a loss within one decade
    # still gets labels.
    a.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 3.0, 5.0)))
    a.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
    a.yaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
    for n, r in enumerate(np.unique(t["restart"])[1:]):  # where each restart took over
        a.axvline(tokens[np.argmax(t["restart"] >= r)], color="grey", ls=":", lw=1,
                  label="restart" if n == 0 else None)
    a.legend(fontsize=7)


def time_panel(a, t):
    step, bottom = t["step"], np.zeros(len(t["step"]))
    for p in PHASES:
        if p in t:
            a.bar(step, t[p], bottom=bottom, width=1.0, label=p[:-2])
            bottom += t[p]
    a.set(xlabel="step", ylabel="s", title="time per step (rank 0)")
    a.legend(fontsize=7, ncol=2)


def grad_panel(a, t, config):
    line_panel(a, t["step"], t["grad_norm"], "|g| before clipping", "gradient norm", color="C2")
    clip = float(config.get("train.grad_clip", 0))
    if clip > 0:
        a.axhline(clip, color="grey", ls="--", lw=1, label=f"--grad-clip {clip:g}")
    skipped = t["skipped"] > 0
    if skipped.any():  # a skipped step's norm may be inf or nan: mark it at the lowest norm
        good = t["grad_norm"][~skipped & np.isfinite(t["grad_norm"])]
        a.plot(t["step"][skipped], np.full(skipped.sum(), good.min() if good.size else 1.0), "x",
               color="C3", label="skipped update")
    a.legend(fontsize=7)


def rank_panels(a_comm, a_busy, t):
    """Per rank, medians over steps: exposed communication (% of the step; the part spent
    waiting for a slower rank drawn over it where the ring could tell) and busy time
    (step - comm - allreduce) over the mean of the ranks; both axes fit the data. A run resumed
    on another rank count has NaN where a step had no such rank: those are left out."""
    secs, comm = t["rank_seconds"], t["rank_comm_s"]
    if secs.shape[1] == 1:
        for a in (a_comm, a_busy):
            a.text(0.5, 0.5, "one rank: no communication or imbalance to show", ha="center",
                   va="center", transform=a.transAxes)
            a.set(title="per rank", xticks=[], yticks=[])
        return
    busy = secs - comm - t["rank_allreduce_s"]
    ranks = np.arange(secs.shape[1])
    frac = 100 * np.nanmedian(comm / secs, axis=0)
    a_comm.bar(ranks, frac, 0.6, color="C3", label="exposed comm, % of step")
    if "rank_peer_wait_s" in t and np.nansum(t["rank_peer_wait_s"]) > 0:  # shm hops tell (lctrain >= the split)
        peer = 100 * np.nanmedian(t["rank_peer_wait_s"] / secs, axis=0)
        a_comm.bar(ranks, peer, 0.6, color="C1", hatch="//", label="of it, waiting for a slower rank")
    a_comm.set(xlabel="rank", ylabel="%", title="exposed communication per rank (median)", xticks=ranks,
               ylim=(0, max(np.nanmax(frac) * 1.25, 1e-3)))
    a_comm.legend(fontsize=7)
    rel = np.nanmedian(busy / np.nanmean(busy, axis=1, keepdims=True), axis=0)
    a_busy.bar(ranks, rel - 1, 0.6, bottom=1, color="C4", label="busy time / mean of ranks")
    a_busy.axhline(1, color="grey", lw=1)
    pad = max(np.nanmax(np.abs(rel - 1)) * 1.3, 1e-3)
    a_busy.set(xlabel="rank", title=f"busy time per rank (median); median step imbalance "
               f"{np.median(t['imbalance']):.3f}", xticks=ranks, ylim=(1 - pad, 1 + pad))
    a_busy.legend(fontsize=7)


def evaluated(t):
    """The rows with an --eval-every evaluation (none in a table from before its columns)."""
    return np.isfinite(t["eval_loss"]) if "eval_loss" in t else np.zeros(len(t["step"]), bool)


def eval_panels(a_loss, a_rate, t):
    """--eval-every: held-out loss against the training loss, and the held-out next-token
    accuracy and passkey retrieval (when the data has passkeys), vs step."""
    e = evaluated(t)
    a_loss.plot(t["step"], t["loss"], color="C0", alpha=0.4, label="training loss")
    line_panel(a_loss, t["step"][e], t["eval_loss"][e], "held-out loss (--eval-data)", "held-out loss",
               color="C3", marker="o")
    a_loss.set(ylabel="nats")
    a_rate.plot(t["step"][e], 100 * t["eval_accuracy"][e], "o-", color="C2", label="next token right")
    keys = e & np.isfinite(t["eval_retrieval"])
    if keys.any():
        a_rate.plot(t["step"][keys], 100 * t["eval_retrieval"][keys], "s-", color="C4",
                    label="passkeys retrieved exactly")
    a_rate.set(xlabel="step", ylabel="%", title="held-out next token and passkeys", ylim=(0, 100))
    a_rate.legend(fontsize=7)


def run_figure(path, name):
    """The eight panels of one table, ten with evaluations (tests inspect the figure)."""
    t, attrs, config = load(path)
    step = t["step"]
    evals = evaluated(t).any()
    fig, ax = plt.subplots(5 if evals else 4, 2, figsize=(12, 16 if evals else 13))
    dp, cp = degrees(t, attrs, config)
    fig.suptitle(f"{name}: dp={dp} cp={cp} seq_len={config.get('train.seq_len', '?')}, {len(step)} steps")
    loss_panel(ax[0, 0], t)
    time_panel(ax[0, 1], t)
    line_panel(ax[1, 0], step, t["tokens_per_s"], "tokens/s", "throughput")
    peak = f" of {float(attrs['peak_gflops']):.1f} GFLOP/s" if "peak_gflops" in attrs else ""
    line_panel(ax[1, 1], step, 100 * t["mfu"], f"MFU, %{peak}", "model FLOPs utilisation", color="C1")
    line_panel(ax[2, 0], step, t["lr"], "learning rate", "learning rate", color="C5")
    grad_panel(ax[2, 1], t, config)
    if "rank_seconds" in t:
        rank_panels(ax[3, 0], ax[3, 1], t)
    if evals:
        eval_panels(ax[4, 0], ax[4, 1], t)
    fig.tight_layout()
    return fig


def per_run_plot(path, name, out_dir):
    fig = run_figure(path, name)
    out = os.path.join(out_dir, f"{name}.png")
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def scaling_plot(paths, out_dir):
    rows = []
    for p in paths:
        t, attrs, config = load(p)
        tps = np.median(t["tokens_per_s"][1:] if len(t["tokens_per_s"]) > 1 else t["tokens_per_s"])
        dp, cp = degrees(t, attrs, config)
        rows.append((cp, dp, int(config.get("train.seq_len", 0)), tps))
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
    a.set(xlabel="cp (ranks per sequence)", ylabel="efficiency vs cp=1", title="context-parallel scaling",
          xticks=sorted({r[0] for r in rows}))
    a.legend(fontsize=7)
    fig.tight_layout()
    out = os.path.join(out_dir, "scaling_vs_cp.png")
    fig.savefig(out, dpi=90)
    plt.close(fig)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("tables", nargs="+", help="timing.h5 files (lctrain train) or run folders")
    ap.add_argument("--out", default="plots", help="directory for the PNG files")
    a = ap.parse_args()
    try:
        paths = [table_path(p) for p in a.tables]
        for p in paths:
            load(p)  # every table is checked before anything is drawn
    except TableError as e:
        print(f"plot_timing.py: error: {e}", file=sys.stderr)
        return 1
    os.makedirs(a.out, exist_ok=True)
    for p, name in zip(paths, plot_names(paths)):
        print("wrote", per_run_plot(p, name, a.out))
    if len(paths) > 1:
        out = scaling_plot(paths, a.out)
        print("wrote", out) if out else print("no cp=1 baseline with a larger cp: no scaling plot")
    return 0


if __name__ == "__main__":
    sys.exit(main())
