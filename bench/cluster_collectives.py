#!/usr/bin/python3
"""Checkpoints and the gradient all-reduce across emulated nodes (tests/cluster/cluster.py), at a
cluster's network-to-compute ratio, with medians over many steps rather than one:
  checkpoint  dp = 2, one rank per node, --checkpoint-every 1: the io_s of every step after the
              first from timing.h5 (full precision), against the same run on one node (2 ranks
              on this machine's cores); --zero 0 (rank 0 writes alone) and --zero 1 (both
              ranks write, collectively);
  all-reduce  2 nodes x 2 ranks, dp = 4: the bytes node 0 sends over its link per step (the
              link's counters, start-up left out), and the all-reduce's share of the step, with
              --grad-reduce flat (MPI_Iallreduce over the 4 ranks), flat with Open MPI's
              hierarchical collectives asked for (coll/han, which has no non-blocking
              all-reduce) and --grad-reduce hierarchical. Two ranks share each node's one CPU
              here: the shares and tokens/s are not a measurement of speed, the bytes are.
    sudo /usr/bin/python3 bench/cluster_collectives.py [--presets tiny,small] [--steps 12]
        [--seq-len 1024] [--rate auto|4gbit] [--only checkpoint|allreduce]
"""
import argparse
import os
import re
import statistics as st
import subprocess
import sys
import tempfile

import h5py

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "cluster"))
import cluster_ratio as cr  # noqa: E402
from cluster import Cluster, sh  # noqa: E402

L = os.path.abspath(os.path.join(here, "..", "build", "app", "lctrain"))


def steps_of(run_dir):
    with h5py.File(os.path.join(run_dir, "timing.h5"), "r") as f:
        return {k: f["steps"][k][1:] for k in ("io_s", "allreduce_s", "seconds", "tokens_per_s")}


def link_bytes(c, node):
    """Bytes node `node`'s end of its link has sent so far (the veth inside its namespace)."""
    out = sh("ip", "netns", "exec", c.ns[node], "ip", "-s", "-j", "link", "show", "eth0").stdout
    return int(re.search(r'"tx":\{"bytes":(\d+)', out).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--presets", default="tiny,small")
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--rate", default="auto")
    ap.add_argument("--only", choices=("checkpoint", "allreduce"), help="one of the two tables")
    a = ap.parse_args()
    cr.L = L
    w = tempfile.mkdtemp(prefix="lct_cluster_collectives.")
    os.chdir(w)
    S, steps = a.seq_len, a.steps
    cr.lct("prepare", "--synthetic", "passkey", "--num-docs", 4 * steps + 8, "--doc-length", S, "-o", "d.h5")
    with Cluster(nodes=2) as probe:  # unshaped, to read one node's peak
        cr.lct("init", "-o", "probe.h5", "--preset", "tiny")
        out = subprocess.run(probe.on_node(0, [L, "train", "--model", "probe.h5", "--data", "d.h5", "--seq-len",
                                                "1024", "--steps", "1", "--run-dir", "peak"]),
                             capture_output=True, text=True, env=cr.ENV).stdout
    peak = float(re.search(r"peak: fp32 ([\d.]+) GFLOP/s per rank", out).group(1))
    rate = a.rate if a.rate != "auto" else f"{max(0.1, peak * 100 / 3000):.2f}gbit"
    print(f"2 emulated nodes x 1 core; node fp32 peak {peak:.1f} GFLOP/s; link {rate} each way, no added latency; "
          f"S = {S}, {steps} steps, medians after the first; {L}")
    train = ["--threads", "1", "train", "--data", "d.h5", "--seq-len", S, "--steps", steps, "--log-every", 1000]
    with Cluster(nodes=2, rate=rate) as c:
        for preset in a.presets.split(","):
            cr.lct("init", "-o", f"{preset}.h5", "--preset", preset)
        if a.only != "allreduce":
            print("| preset | checkpoint | written by | one node | 2 nodes | ratio |")
            print("| --- | ---: | --- | ---: | ---: | ---: |")
        for preset in a.presets.split(",") if a.only != "allreduce" else []:
            # --zero 0: the weights and moments replicated, rank 0 writes alone; --zero 1: each
            # rank writes its half of the moments, collectively (parallel HDF5).
            for zero, who in ((0, "rank 0 alone"), (1, "both ranks (--zero 1)")):
                args = [*train, "--model", f"{preset}.h5", "--dp", 2, "--batch-size", 1, "--checkpoint-every", 1,
                        "--zero", zero]
                one = subprocess.run(["mpirun", "-n", "2", L, *map(str, args), "--run-dir", f"one_{preset}{zero}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=cr.ENV).stdout
                cr.summary(f"one_{preset}{zero}", one)
                cr.on_nodes(c, [L, *args], f"nodes_{preset}{zero}")
                size = os.path.getsize(f"nodes_{preset}{zero}/checkpoints/step_{steps:08d}.h5") / 2**20
                o = st.median(steps_of(f"one_{preset}{zero}")["io_s"])
                m = st.median(steps_of(f"nodes_{preset}{zero}")["io_s"])
                print(f"| {preset} | {size:.1f} MiB | {who} | {o:.3f} s | {m:.3f} s | {m / o:.2f} |")
        if a.only == "checkpoint":
            return print(f"runs in {w}")
        print()
        print("| preset | gradient all-reduce | link bytes per step, node 0 -> 1 | all-reduce share of the step | tokens/s |")
        print("| --- | --- | ---: | ---: | ---: |")
        variants = (("flat", ["--grad-reduce", "flat"], []),
                    ("flat, Open MPI coll/han", ["--grad-reduce", "flat"], ["--mca", "coll_han_priority", "100"]),
                    ("hierarchical", ["--grad-reduce", "hierarchical"], []))
        for preset in a.presets.split(","):
            for name, flags, mca in variants:
                sent = []
                for k in (steps // 3, steps):  # the difference leaves start-up's traffic out
                    run_dir = f"{name.split(',')[0]}{'_han' if mca else ''}_{preset}_{k}"
                    args = ["--oversubscribe", *train[:-4], "--steps", k, "--log-every", 1000,
                            "--model", f"{preset}.h5", "--dp", 4, "--batch-size", 1, "--checkpoint-every", 100000, *flags]
                    before = link_bytes(c, 0)
                    rc, text = c.run([L, *map(str, args), "--run-dir", run_dir], 2, extra=mca,
                                     finished=f"wrote {run_dir}/timing.h5")
                    sent.append(link_bytes(c, 0) - before)
                    if not os.path.exists(f"{run_dir}/timing.h5"):
                        sys.exit(f"cluster_collectives: {run_dir} failed:\n{text[-3000:]}")
                s = steps_of(run_dir)
                frac = st.median(s["allreduce_s"] / s["seconds"])
                per_step = (sent[1] - sent[0]) / (steps - steps // 3)
                print(f"| {preset} | {name} | {per_step / 2**20:.2f} MiB | {100 * frac:.1f}% | "
                      f"{st.median(s['tokens_per_s']):,.0f} |")
    print(f"runs in {w}")


if __name__ == "__main__":
    main()
