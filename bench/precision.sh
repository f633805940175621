#!/usr/bin/env bash
# End to end, fp32 against bf16 (--precision) on the same cores: the 30m preset, one
# SEQ_LEN-token passkey document per sequence, alternating ROUNDS times; prints each run's
# median tokens/s and MFU (steps after the first, the last step's checkpoint excluded) and
# the median bf16/fp32 ratio over rounds.
#   bash bench/precision.sh [SEQ_LEN] [ROUNDS]      (from the repository root, after a build)
# Runs in a user's default environment: these build machines export OPENBLAS_CORETYPE, a
# user's shell does not.
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup prec
S=${1:-4096}
ROUNDS=${2:-3}
STEPS=${STEPS:-5}
$L init -o "$W/m.h5" --preset 30m > /dev/null
$L prepare --synthetic passkey --num-docs $((STEPS + 2)) --doc-length "$S" -o "$W/d.h5" > /dev/null
for r in $(seq "$ROUNDS"); do
  for p in fp32 bf16; do
    $L train --model "$W/m.h5" --data "$W/d.h5" --run-dir "$W/$p$r" --seq-len "$S" --steps "$STEPS" \
       --precision "$p" --log-every 1000 > "$W/$p$r.log"
  done
done
/usr/bin/python3 - "$W" "$ROUNDS" "$S" <<'PY'
import sys, statistics, h5py, numpy as np
w, rounds, S = sys.argv[1], int(sys.argv[2]), sys.argv[3]
ratios = []
for r in range(1, rounds + 1):
    got = {}
    for p in ("fp32", "bf16"):
        with h5py.File(f"{w}/{p}{r}/timing.h5") as f:
            s = f["steps"]
            keep = slice(1, -1) if len(s["step"]) > 2 else slice(1, None)
            got[p] = (np.median(s["tokens_per_s"][keep]), np.median(s["mfu"][keep]), f.attrs["peak_how"])
    ratios.append(got["bf16"][0] / got["fp32"][0])
    print(f"round {r}: fp32 {got['fp32'][0]:.1f} tokens/s (MFU {100 * got['fp32'][1]:.1f}%), "
          f"bf16 {got['bf16'][0]:.1f} tokens/s (MFU {100 * got['bf16'][1]:.1f}% of the {got['bf16'][2].split(',')[0]} peak), "
          f"ratio {ratios[-1]:.2f}")
print(f"seq_len {S}: bf16 / fp32 tokens/s median over {rounds} rounds: {statistics.median(ratios):.2f}")
PY
