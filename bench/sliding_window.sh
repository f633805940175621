#!/usr/bin/env bash
# Sliding-window attention against full causal attention on one node, one S-token document
# per sequence, in every cp mode that applies:
#   1 rank x T threads           full causal, then sliding window W
#   T ranks x 1 thread, cp = T   ring over shm: full causal (zigzag), window (auto split =
#                                contiguous, the ring takes 2 steps), window with zigzag
#                                (every step), window with Ulysses
# For each: median tokens/s and MFU (steps after the first), exposed communication, the
# gradient allreduce's share of the step, attention imbalance (max/mean over ranks), and
# the ring traffic of rank 0.
#   bash bench/sliding_window.sh [PRESET] [S] [W] [STEPS] [T]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup win
PRESET=${1:-small}
S=${2:-32768}
WIN=${3:-4096}
STEPS=${4:-4}
T=${5:-2}
$L init -o "$W/full.h5" --preset "$PRESET" > /dev/null
$L init -o "$W/win.h5" --preset "$PRESET" --sliding-window "$WIN" > /dev/null
$L prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$W/d.h5" > /dev/null
common=(train --data "$W/d.h5" --seq-len "$S" --steps "$STEPS" --log-every 1000)
ranks=(mpirun -n "$T" --map-by core --bind-to core "$L" --threads 1)
run() {  # NAME LAUNCH... : keeps the output for the traffic line
  local name=$1; shift
  "$@" --run-dir "$W/$name" > "$W/$name.out"
}
run one_full $L --threads "$T" "${common[@]}" --model "$W/full.h5"
run one_win $L --threads "$T" "${common[@]}" --model "$W/win.h5"
run ring_full "${ranks[@]}" "${common[@]}" --model "$W/full.h5" --cp "$T"
run ring_win "${ranks[@]}" "${common[@]}" --model "$W/win.h5" --cp "$T"
run ring_win_zigzag "${ranks[@]}" "${common[@]}" --model "$W/win.h5" --cp "$T" --cp-split zigzag
run ulysses_win "${ranks[@]}" "${common[@]}" --model "$W/win.h5" --cp "$T" --cp-algo ulysses
/usr/bin/python3 - "$W" "$PRESET" "$S" "$WIN" "$T" <<'PY'
import re, sys, h5py, numpy as np
w, preset, S, win, T = sys.argv[1:]
print(f"{preset} preset, S = {S}, W = {win}, {T} cores; medians of the steps after the first")
print("| run | tokens/s | MFU | exposed comm | gradient allreduce | attention imbalance | ring traffic, rank 0 |")
print("| --- | ---: | ---: | ---: | ---: | ---: | --- |")
for run in ["one_full", "one_win", "ring_full", "ring_win", "ring_win_zigzag", "ulysses_win"]:
    s = h5py.File(f"{w}/{run}/timing.h5")["steps"]
    tps, mfu = np.median(s["tokens_per_s"][1:]), np.median(s["mfu"][1:])
    comm = imb = allreduce = "-"
    if s["rank_attn_s"].shape[1] > 1:
        a = s["rank_attn_s"][1:]
        imb = f"{np.median(a.max(1) / a.mean(1)):.3f}"
        comm = f"{100 * np.median(s['exposed_comm_frac'][1:]):.2f}%"
        allreduce = f"{100 * np.median(s['allreduce_s'][1:] / s['seconds'][1:]):.2f}%"
    m = re.search(r"ring traffic of rank 0 in this run: (.*)", open(f"{w}/{run}.out").read())
    print(f"| {run} | {tps:,.1f} | {100 * mfu:.1f}% | {comm} | {allreduce} | {imb} | {m.group(1) if m else '-'} |")
PY
