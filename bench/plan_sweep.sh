#!/usr/bin/env bash
# `lctrain plan` against real runs, with nothing but bash, coreutils, tar and mpirun (so it
# also runs inside the packed tree of ../shared/tools/bigbox, which has no Python or grep):
# plans a job on this node (its cores, its memory), then trains each of the plan's top N
# layouts for STEPS steps with the flags the plan printed (a checkpoint at step 2), keeping
# plan.out and every run's timing.h5 and log in OUTDIR, packed as OUTDIR/runs.tar.
# `bench/plan_table.py OUTDIR` (or the tar) then compares predicted and measured step time
# and memory.
#   bash bench/plan_sweep.sh OUTDIR [PRESET] [S] [GLOBAL_BATCH] [N] [STEPS] [PRECISIONS]
# LCTRAIN (default: build/app/lctrain, else lctrain on PATH) and the usual mpirun environment
# (OMPI_ALLOW_RUN_AS_ROOT...) are taken from the caller; OPENBLAS_CORETYPE is unset, as in
# a user's shell.
set -euo pipefail
OUT=$1; PRESET=${2:-30m}; S=${3:-4096}; B=${4:-2}; N=${5:-3}; STEPS=${6:-4}; PRECISIONS=${7:-fp32,bf16}
unset OPENBLAS_CORETYPE
here=$(cd "$(dirname "$0")/.." && pwd)
L=${LCTRAIN:-$here/build/app/lctrain}
[ -x "$L" ] || L=$(command -v lctrain) || { echo "plan_sweep: no lctrain (set LCTRAIN)" >&2; exit 1; }
mkdir -p "$OUT"
"$L" init -o "$OUT/model.h5" --preset "$PRESET" --force > /dev/null
"$L" prepare --synthetic passkey --num-docs $((B * (STEPS + 1))) --doc-length "$S" -o "$OUT/data.h5" --force > /dev/null
"$L" plan --model "$OUT/model.h5" --seq-len "$S" --global-batch "$B" --precision "$PRECISIONS" --top "$N" \
  > "$OUT/plan.out"
row='^ *([0-9]+) .* ([0-9]+) rank\(s\)/node x --threads ([0-9]+): train (.*)$'
while IFS= read -r line; do
  [[ $line =~ $row ]] || continue
  n=${BASH_REMATCH[1]}; ranks=${BASH_REMATCH[2]}; threads=${BASH_REMATCH[3]}; flags=${BASH_REMATCH[4]}
  echo "== layout $n: $ranks rank(s) x $threads thread(s): $flags"
  cmd=("$L" --threads "$threads" train --model "$OUT/model.h5" --data "$OUT/data.h5" --run-dir "$OUT/run$n"
       --seq-len "$S" --steps "$STEPS" --checkpoint-every 2 --log-every 1000 --force)
  # shellcheck disable=SC2206  # the plan's flags are words
  cmd+=($flags)
  if [ "$ranks" -gt 1 ]; then cmd=(mpirun -n "$ranks" --map-by core --bind-to core "${cmd[@]}"); fi
  "${cmd[@]}" < /dev/null > "$OUT/run$n.log" 2>&1 || echo "   layout $n failed (exit $?): see run$n.log"  # (mpirun would read the plan)
done < "$OUT/plan.out"
(cd "$OUT" && tar cf runs.tar plan.out run*.log run*/timing.h5)
echo "packed $OUT/runs.tar"
