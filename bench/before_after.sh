#!/usr/bin/env bash
# One lctrain against another on the same cores and MPI (a change's before and after): the
# tokens/s of 1 rank, cp = 2 and dp = 2, rounds alternating the two binaries so that a slow
# spell of a shared host falls on both, and which of them goes first, so that neither always
# runs in the other's wake (a slow spell that starts mid-round falls on each in turn). Prints
# one line per run, then the medians and their ratio (after / before; bench/pair_table.py).
#   bash bench/before_after.sh BEFORE_LCTRAIN AFTER_LCTRAIN [PRESET] [SEQ_LEN] [STEPS] [ROUNDS]
# A "before" binary: git worktree add /tmp/before REV && cmake -S /tmp/before -B /tmp/before/build
# -DCMAKE_BUILD_TYPE=Release -DLCT_BUILD_TESTS=OFF && cmake --build /tmp/before/build --target lctrain
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,8p "$0"; exit 2; }
declare -A LCT=([before]=$(realpath "$1") [after]=$(realpath "$2"))
source "$(dirname "$0")/common.sh"
bench_setup before_after
PRESET=${3:-tiny}
S=${4:-2048}
STEPS=${5:-20}
ROUNDS=${6:-3}
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
$L prepare --synthetic passkey --num-docs $((4 * STEPS)) --doc-length "$S" -o "$W/d.h5" > /dev/null
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $PRESET, S = $S, $STEPS steps, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  for layout in "one 1" "cp 2" "dp 2"; do
    order="before after"
    [ $((r % 2)) = 0 ] && order="after before"
    for b in $order; do  # each pair back to back
      d="$W/r${r}_${b}_${layout/ /}"
      flags=(--batch-size 1)
      [ "${layout% *}" = cp ] && flags=(--cp 2 --batch-size 1)
      [ "${layout% *}" = dp ] && flags=(--dp 2 --batch-size 2)
      mpirun -n "${layout#* }" "${LCT[$b]}" train --model "$W/m.h5" --data "$W/d.h5" --seq-len "$S" \
        --steps "$STEPS" "${flags[@]}" --checkpoint-every "$STEPS" --log-every 1000 --run-dir "$d" \
        > "$d.out" 2>&1 || { tail -5 "$d.out"; exit 1; }
    done
  done
done
/usr/bin/python3 bench/pair_table.py "$W" before after before after
