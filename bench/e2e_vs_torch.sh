#!/usr/bin/env bash
# End to end: lctrain vs PyTorch 1.13 (bench/torch_train.py) training the same 30m model on
# the same data on the same cores, alternating ROUNDS times; prints the medians and their
# ratio. PyTorch runs in its fastest configuration here (torch.set_num_threads(THREADS) and
# OpenBLAS's default thread count, measured against OPENBLAS_NUM_THREADS=1). Each sequence is one 4096-token passkey document, so both compute full causal
# attention over every sequence.
#   bash bench/e2e_vs_torch.sh [SEQ_LEN] [ROUNDS]      (from the repository root, after a build)
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup e2e
S=${1:-4096}
ROUNDS=${2:-3}
STEPS=${STEPS:-6}
TORCH_STEPS=${TORCH_STEPS:-3}   # a PyTorch step takes over a minute at 4096
THREADS=${THREADS:-2}
$L init -o "$W/m.h5" --preset 30m > /dev/null
$L prepare --synthetic passkey --num-docs $((STEPS + 2)) --doc-length "$S" -o "$W/d.h5" > /dev/null
lct=() torch=()
for r in $(seq "$ROUNDS"); do
  $L --threads "$THREADS" train --model "$W/m.h5" --data "$W/d.h5" --run-dir "$W/run$r" \
     --seq-len "$S" --steps "$STEPS" --log-every 1000 > "$W/lct$r.log"
  lct+=("$(/usr/bin/python3 -c "import h5py,numpy as n; print(n.median(h5py.File('$W/run$r/timing.h5')['steps/tokens_per_s'][1:]))")")
  /usr/bin/python3 bench/torch_train.py --model "$W/m.h5" --data "$W/d.h5" --seq-len "$S" \
     --steps "$TORCH_STEPS" --threads "$THREADS" > "$W/torch$r.log"
  torch+=("$(awk '/^torch: seq_len/ {print $5}' "$W/torch$r.log")")
  echo "round $r: lctrain ${lct[-1]} tokens/s, torch ${torch[-1]} tokens/s"
done
/usr/bin/python3 - "${lct[*]}" "${torch[*]}" "$S" <<'PY'
import statistics, sys
l = [float(x) for x in sys.argv[1].split()]; t = [float(x) for x in sys.argv[2].split()]
ml, mt = statistics.median(l), statistics.median(t)
print(f"seq_len {sys.argv[3]}: lctrain {ml:.1f} tokens/s, PyTorch {mt:.1f} tokens/s, ratio {ml / mt:.2f} (medians of {len(l)} rounds)")
PY
