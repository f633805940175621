#!/usr/bin/env bash
# Context-parallel layouts of one node side by side, with nothing but bash, mpirun and
# lctrain (so it also runs inside the packed tree of ../shared/tools/bigbox, which has no
# Python): trains the PRESET model on one S-token passkey document per sequence for STEPS
# steps in each configuration, and keeps every run's timing.h5 and log in OUTDIR (also
# packed as OUTDIR/runs.tar, one file to bring back). `bench/cp_table.py OUTDIR` then prints
# the table: tokens/s, MFU, exposed communication split into waiting for a slower rank and
# transfer, imbalance.
#   bash bench/cp_sweep.sh OUTDIR PRESET "S ..." "CONFIG ..." [STEPS] [PRECISION]
# CONFIG is RANKSxTHREADS (one rank: no cp) or RANKSxTHREADS:ALGO[:TRANSPORT], with ALGO
# ring, allgather, ulysses or hybridU (hybrid, --ulysses-degree U) and TRANSPORT shm or mpi
# (the ring's hops; default auto). Every rank of a configuration is one cp rank (cp = RANKS).
# Example (16 cores):
#   bash bench/cp_sweep.sh /work/cp small "32768" "1x16 16x1:ring:shm 16x1:ring:mpi 8x2:ring:shm
#     8x2:ring:mpi 4x4:ulysses 16x1:hybrid4:shm 16x1:allgather" 3
# It needs bash, coreutils, tar and mpirun (all in that tree; grep is not). LCTRAIN (default:
# build/app/lctrain, else lctrain on PATH) and the usual mpirun environment
# (OMPI_ALLOW_RUN_AS_ROOT...) are taken from the caller; OPENBLAS_CORETYPE is unset, as in
# a user's shell.
set -euo pipefail
OUT=$1; PRESET=$2; LENS=$3; CONFIGS=$4; STEPS=${5:-3}; PRECISION=${6:-fp32}
unset OPENBLAS_CORETYPE
here=$(cd "$(dirname "$0")/.." && pwd)
L=${LCTRAIN:-$here/build/app/lctrain}
[ -x "$L" ] || L=$(command -v lctrain) || { echo "cp_sweep: no lctrain (set LCTRAIN)" >&2; exit 1; }
for c in $CONFIGS; do  # every configuration checked before any runs
  [[ $c =~ ^[0-9]+x[0-9]+$ || $c =~ ^[0-9]+x[0-9]+:(ring|allgather|ulysses|hybrid[0-9]+)(:(shm|mpi|auto))?$ ]] ||
    { echo "cp_sweep: '$c' is not RANKSxTHREADS or RANKSxTHREADS:ALGO[:TRANSPORT] (ALGO ring, allgather, ulysses, hybridU; TRANSPORT shm, mpi, auto)" >&2; exit 2; }
done
mkdir -p "$OUT"
"$L" init -o "$OUT/model.h5" --preset "$PRESET" --force > /dev/null
for S in $LENS; do
  "$L" prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$OUT/data$S.h5" --force > /dev/null
  for c in $CONFIGS; do
    IFS=: read -r shape algo transport <<< "$c"
    ranks=${shape%x*}
    threads=${shape#*x}
    name="S${S}_${c//:/_}"
    flags=(train --model "$OUT/model.h5" --data "$OUT/data$S.h5" --seq-len "$S" --steps "$STEPS"
           --precision "$PRECISION" --log-every 1 --run-dir "$OUT/$name" --force)
    if [ "$ranks" -gt 1 ]; then
      case "$algo" in
        hybrid*) flags+=(--cp "$ranks" --cp-algo hybrid --ulysses-degree "${algo#hybrid}") ;;
        *) flags+=(--cp "$ranks" --cp-algo "${algo:-ring}") ;;
      esac
      [ -n "${transport:-}" ] && flags+=(--cp-transport "$transport")
      if [ "$threads" -gt 1 ]; then map=(--map-by "slot:PE=$threads"); else map=(--map-by core); fi
      cmd=(mpirun -n "$ranks" "${map[@]}" --bind-to core "$L" --threads "$threads" "${flags[@]}")
    else
      cmd=("$L" --threads "$threads" "${flags[@]}")
    fi
    echo "== $name: ${cmd[*]}"
    start=$(date +%s)
    if "${cmd[@]}" > "$OUT/$name.log" 2>&1; then
      while read -r line; do  # no grep in the packed tree
        [[ $line == "figure of merit"* ]] && echo "   $line [$(($(date +%s) - start)) s]"
      done < "$OUT/$name.log"
    else
      echo "   FAILED (exit $?): $(tail -n 1 "$OUT/$name.log")"
    fi
  done
done
(cd "$OUT" && tar -cf runs.tar --exclude='*/checkpoints' S*_*/timing.h5 S*_*.log)
echo "wrote $OUT/runs.tar"
