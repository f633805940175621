#!/usr/bin/env bash
# `lctrain plan` against real runs: plans a job on this node (its cores, its memory), then
# trains each of the plan's top N layouts for STEPS steps with the flags the plan printed,
# and compares the predicted step time with the median measured one (steps after the first,
# the checkpoint's write left out)
# and the predicted memory per rank with rank 0's peak resident memory (a checkpoint at step 2
# counts: its gathers are part of the peak).
#   bash bench/plan_vs_measured.sh [PRESET] [S] [GLOBAL_BATCH] [N] [STEPS] [PRECISIONS]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup plan
PRESET=${1:-30m}
S=${2:-4096}
B=${3:-2}
N=${4:-4}
STEPS=${5:-4}
PRECISIONS=${6:-fp32,bf16}
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
$L prepare --synthetic passkey --num-docs $((B * (STEPS + 1))) --doc-length "$S" -o "$W/d.h5" > /dev/null
$L plan --model "$W/m.h5" --seq-len "$S" --global-batch "$B" --precision "$PRECISIONS" --top "$N" | tee "$W/plan.out" |
  grep -E "^(fp32|bf16) on|^links|^plan:"
/usr/bin/python3 - "$W" "$L" "$S" "$STEPS" "$N" <<'PY'
import os, re, subprocess, sys, h5py, numpy as np
w, lct, S, steps, n = sys.argv[1:]
row = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                 r"\s+(\d+)\s+(\d+)\s+(\d+) rank\(s\)/node x --threads (\d+): train (.*)$")
rows = [m for m in map(row.match, open(f"{w}/plan.out").read().splitlines()) if m]
print("| # | layout | predicted step | measured step | measured / predicted | predicted memory/rank | peak RSS rank 0 |")
print("| --- | --- | ---: | ---: | ---: | ---: | ---: |")
for m in rows[:int(n)]:
    ranks, threads, flags = int(m.group(11)), int(m.group(12)), m.group(13).split()
    run = f"{w}/run{m.group(1)}"
    cmd = [lct, "--threads", str(threads), "train", "--model", f"{w}/m.h5", "--data", f"{w}/d.h5", "--run-dir", run,
           "--seq-len", S, "--steps", steps, "--checkpoint-every", "2", "--log-every", "1000", *flags]
    if ranks > 1:
        cmd = ["mpirun", "-n", str(ranks), "--map-by", "core", "--bind-to", "core"] + cmd
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    s = h5py.File(f"{run}/timing.h5")["steps"]
    step = np.median((s["seconds"][:] - s["io_s"][:])[1:])  # the checkpoint's write is not a step's work
    rss = np.max(s["peak_rss_mib"][:]) / 1024
    pred_s, pred_gib = float(m.group(2)), float(m.group(4))
    print(f"| {m.group(1)} | {ranks} x {threads}: {' '.join(flags)} | {pred_s:.2f} s | {step:.2f} s | "
          f"{step / pred_s:.2f} | {pred_gib:.2f} GiB | {rss:.2f} GiB |")
PY
