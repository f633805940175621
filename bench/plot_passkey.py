#!/usr/bin/python3
"""Plots passkey retrieval by depth x context length from an lctrain eval file (h5py -> PNG).

  lctrain prepare --synthetic passkey --doc-lengths 512,1024,2048 -o pk.h5
  lctrain eval --model MODEL.h5 --data pk.h5 --seq-len 2048 --out eval.h5
  /usr/bin/python3 bench/plot_passkey.py eval.h5            # writes eval-passkey.png

A heat map: the depth of the key in its document on y (0-20% at the top), the document
length in tokens on x, each cell the share of keys retrieved exactly (greedy), annotated in %
with its counts (retrieved/asked); grey cells had no document. The colour bar runs from 0 to
100%. The title names the model and the totals. --out names another PNG.
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


class EvalFileError(Exception):
    """A file that cannot be plotted: one line for the user, no traceback."""


def load(path):
    """The table of an eval file: lengths [L], depth_edges [B+1], correct and total [L, B], and
    the model's name."""
    if not os.path.exists(path):
        raise EvalFileError(f"'{path}' does not exist (give the file lctrain eval --out wrote)")
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get("lctrain_file", "")
            if kind != "eval":
                raise EvalFileError(f"'{path}' is not an lctrain eval file (lctrain_file = '{kind}')")
            if "passkey/total" not in f:
                raise EvalFileError(
                    f"'{path}' holds no passkey results by depth x length: its data had no passkey "
                    "documents (or none shorter than --seq-len), or an older lctrain wrote it; "
                    "evaluate on lctrain prepare --synthetic passkey data again")
            t = {k: f["passkey"][k][:] for k in ("lengths", "depth_edges", "correct", "total")}
            model = f.attrs.get("model", "")
            if not model and "provenance/config" in f:
                model = f["provenance/config"].attrs.get("eval.model", "")
    except OSError as e:
        raise EvalFileError(f"'{path}' cannot be read as HDF5: {e}") from None
    t["model"] = str(model.decode() if isinstance(model, bytes) else model) or "?"
    return t


def default_png(path):
    """eval.h5 -> eval-passkey.png, beside it."""
    stem = path[:-3] if path.endswith(".h5") else path
    return stem + "-passkey.png"


def heat_map(t, png):
    correct, total = t["correct"].astype(float), t["total"].astype(float)
    with np.errstate(invalid="ignore", divide="ignore"):
        pct = np.where(total > 0, 100.0 * correct / total, np.nan)  # [L, B]
    lengths, edges = t["lengths"], t["depth_edges"]
    L, B = pct.shape
    fig, ax = plt.subplots(figsize=(max(5.0, 1.4 * L + 3.0), 1.0 + 0.8 * B + 1.2))
    cmap = plt.get_cmap("RdYlGn").copy()
    cmap.set_bad("0.85")
    im = ax.imshow(np.ma.masked_invalid(pct.T), cmap=cmap, vmin=0, vmax=100, aspect="auto")
    for li in range(L):
        for b in range(B):
            if total[li, b] == 0:
                ax.text(li, b, "no docs", ha="center", va="center", fontsize=8, color="0.4")
                continue
            dark = pct[li, b] < 25 or pct[li, b] > 80  # the colour map's ends: white text reads
            ax.text(li, b, f"{pct[li, b]:.0f}%\n{int(correct[li, b])}/{int(total[li, b])}", ha="center",
                    va="center", fontsize=9, color="white" if dark else "black")
    ax.set_xticks(range(L), [f"{int(n)}" for n in lengths])
    ax.set_yticks(range(B), [f"{100 * edges[b]:.0f}-{100 * edges[b + 1]:.0f}%" for b in range(B)])
    ax.set_xlabel("context length (tokens per document)")
    ax.set_ylabel("depth of the key")
    bar = fig.colorbar(im, ax=ax)
    bar.set_label("keys retrieved exactly (%)")
    got, asked = int(correct.sum()), int(total.sum())
    model = t["model"] if len(t["model"]) <= 60 else "..." + t["model"][-57:]
    ax.set_title(f"passkey retrieval: {model}\n"
                 f"{got} / {asked} keys ({100.0 * got / asked if asked else 0:.1f}%), "
                 f"{L} length{'s' if L > 1 else ''} x {B} depths", fontsize=10)
    fig.tight_layout()
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("eval_file", help="the HDF5 file lctrain eval --out wrote")
    ap.add_argument("--out", help="the PNG to write (default: EVAL-passkey.png beside the eval file)")
    a = ap.parse_args()
    try:
        t = load(a.eval_file)
    except EvalFileError as e:
        print(f"plot_passkey.py: error: {e}", file=sys.stderr)
        return 1
    print("wrote", heat_map(t, a.out or default_png(a.eval_file)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
