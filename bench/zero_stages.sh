#!/usr/bin/env bash
# The ZeRO stages against each other at dp = RANKS (one rank per core, one thread each): the
# median tokens/s of the steps after the first, the gradient traffic's share of the step
# (allreduce_s: the reduction, the parameter gathers and, for stage 3, the unit gathers),
# and rank 0's peak resident memory.
#   bash bench/zero_stages.sh [PRESET] [S] [STEPS] [RANKS]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup zero
PRESET=${1:-30m}
S=${2:-4096}
STEPS=${3:-5}
RANKS=${4:-2}
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
$L prepare --synthetic passkey --num-docs $((RANKS * (STEPS + 1))) --doc-length "$S" -o "$W/d.h5" > /dev/null
for z in 0 1 2 3; do
  mpirun -n "$RANKS" --map-by core --bind-to core "$L" --threads 1 train --model "$W/m.h5" --data "$W/d.h5" \
    --run-dir "$W/z$z" --seq-len "$S" --steps "$STEPS" --dp "$RANKS" --zero "$z" --log-every 1000 > /dev/null
done
/usr/bin/python3 - "$W" "$PRESET" "$S" "$RANKS" <<'PY'
import sys, h5py, numpy as np
w, preset, S, ranks = sys.argv[1:]
print(f"{preset} preset, S = {S}, dp = {ranks} (1 thread per rank), fp32; medians of the steps after the first")
print("| --zero | tokens/s | gradient traffic, % of step | peak RSS rank 0 |")
print("| --- | ---: | ---: | ---: |")
for z in range(4):
    s = h5py.File(f"{w}/z{z}/timing.h5")["steps"]
    share = 100 * np.median(s["allreduce_s"][1:] / s["seconds"][1:])
    print(f"| {z} | {np.median(s['tokens_per_s'][1:]):,.0f} | {share:.1f}% | {s['peak_rss_mib'][:].max():,.0f} MiB |")
PY
