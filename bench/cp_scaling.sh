#!/usr/bin/env bash
# Context parallelism on one node: the PRESET model (default 30m) at each SEQ_LEN, trained by
#   1 rank x T threads            (no context parallelism)
#   T ranks x 1 thread, cp = T    zigzag split
#   T ranks x 1 thread, cp = T    contiguous split (for comparison)
# and for each: median tokens/s (steps after the first), exposed communication (share of
# step time blocked on ring transfers; of it, the part spent waiting for a slower rank, which
# shared-memory hops tell apart, and the transfers') and attention-time imbalance (max / mean
# over ranks of each rank's attention compute), from the runs' timing tables.
#   bash bench/cp_scaling.sh "16384 32768" [STEPS] [T] [PRESET]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup cp
LENS=${1:-"16384 32768"}
STEPS=${2:-3}
T=${3:-2}
PRESET=${4:-30m}
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
for S in $LENS; do
  $L prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$W/d$S.h5" > /dev/null
  common=(train --model "$W/m.h5" --data "$W/d$S.h5" --seq-len "$S" --steps "$STEPS" --log-every 1000)
  $L --threads "$T" "${common[@]}" --run-dir "$W/one$S" > /dev/null
  mpirun -n "$T" --map-by core --bind-to core "$L" --threads 1 "${common[@]}" --cp "$T" --run-dir "$W/zig$S" > /dev/null
  mpirun -n "$T" --map-by core --bind-to core "$L" --threads 1 "${common[@]}" --cp "$T" --cp-split contiguous \
    --run-dir "$W/con$S" > /dev/null
  /usr/bin/python3 - "$W" "$S" "$T" <<'PY'
import sys
sys.path.insert(0, "bench")
from cp_table import row  # medians over the steps after the first, as in bench/cp_table.py
w, S, T = sys.argv[1], sys.argv[2], sys.argv[3]
stats = lambda run: row(f"{w}/{run}{S}")
one, zig, con = stats("one"), stats("zig"), stats("con")
print(f"S={S}: 1 rank x {T} threads {one['tps']:.1f} tok/s | {T} ranks x 1 thread cp={T}: "
      f"zigzag {zig['tps']:.1f} tok/s = {zig['tps'] / one['tps']:.2f} of 1 rank, exposed comm "
      f"{100 * zig['comm']:.2f}% (waiting for a slower rank {100 * zig.get('peer', 0):.2f}%, transfers "
      f"{100 * zig.get('transfer', zig['comm']):.2f}%), attention imbalance {zig['imb']:.3f} | contiguous {con['tps']:.1f} tok/s "
      f"= {con['tps'] / one['tps']:.2f}, attention imbalance {con['imb']:.3f}")
PY
done
