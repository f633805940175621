#!/usr/bin/env bash
# Two cores three ways: one rank on 2 threads, tensor parallelism (tp = 2: each rank half the
# heads, SwiGLU rows and vocabulary; 4 all-reduces per layer per step), and context
# parallelism (cp = 2: each rank half the sequence; the ring's K/V permutes). For each S:
# the median tokens/s of the steps after the first, the share of the step spent in exposed
# ring communication (exposed_comm_frac) and in all-reduces (allreduce_s: tp's activation
# sums and the gradient reduction), and rank 0's peak resident memory.
#   bash bench/tp_vs_cp.sh [PRESET] [STEPS] [S ...]
# The byte vocabulary (259) does not split in two: the model gets --vocab-size 260.
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup tpcp
PRESET=${1:-30m}
STEPS=${2:-4}
shift $(($# < 2 ? $# : 2))
LENGTHS=("$@")
[ ${#LENGTHS[@]} -gt 0 ] || LENGTHS=(4096 16384)
$L init -o "$W/m.h5" --preset "$PRESET" --vocab-size 260 > /dev/null
for S in "${LENGTHS[@]}"; do
  $L prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$W/d$S.h5" > /dev/null
  common=(train --model "$W/m.h5" --data "$W/d$S.h5" --seq-len "$S" --steps "$STEPS" --log-every 1000)
  $L --threads 2 "${common[@]}" --run-dir "$W/one$S" > /dev/null
  for axis in tp cp; do
    mpirun -n 2 --map-by core --bind-to core "$L" --threads 1 "${common[@]}" --"$axis" 2 \
      --run-dir "$W/$axis$S" > /dev/null
  done
done
/usr/bin/python3 - "$W" "$PRESET" "${LENGTHS[@]}" <<'PY'
import sys, h5py, numpy as np
w, preset, lengths = sys.argv[1], sys.argv[2], sys.argv[3:]
print(f"{preset} preset (vocabulary 260), fp32, 2 cores; medians of the steps after the first")
print("| S | layout | tokens/s | exposed ring comm | all-reduces, % of step | peak RSS rank 0 |")
print("| ---: | --- | ---: | ---: | ---: | ---: |")
for S in lengths:
    for run, name in (("one", "1 rank x 2 threads"), ("tp", "tp = 2 (2 ranks x 1 thread)"), ("cp", "cp = 2 (2 ranks x 1 thread)")):
        s = h5py.File(f"{w}/{run}{S}/timing.h5")["steps"]
        ar = 100 * np.median(s["allreduce_s"][1:] / s["seconds"][1:])
        ex = 100 * np.median(s["exposed_comm_frac"][1:])
        print(f"| {S} | {name} | {np.median(s['tokens_per_s'][1:]):,.0f} | {ex:.1f}% | {ar:.1f}% | {s['peak_rss_mib'][:].max():,.0f} MiB |")
PY
