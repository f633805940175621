#!/usr/bin/env bash
# Open MPI against an MPICH-family MPI on the same cores: cp = 2 and dp = 2 training speed and
# the 2-rank checkpoint time, each launched the way a user would, with no binding flags
# (Open MPI's mpirun binds a rank per core by default, MPICH's hydra binds nothing: lctrain
# must place its ranks either way). Rounds alternate the MPIs so that a slow spell of a
# shared host falls on both. Prints one line per run and the medians with their ratios.
#   bash bench/mpi_compare.sh [PRESET] [SEQ_LEN] [STEPS] [ROUNDS]
# Needs build/ (Open MPI) and build-mpich/ (cmake -DMPI_C_COMPILER=mpicc.mpich ...: docs/mpi.md).
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup mpi_compare
PRESET=${1:-tiny}
S=${2:-2048}
STEPS=${3:-20}
ROUNDS=${4:-3}
declare -A LCT=([openmpi]=build/app/lctrain [mpich]=build-mpich/app/lctrain)
declare -A RUN=([openmpi]="mpirun -n 2" [mpich]="mpiexec.mpich -n 2")
for m in openmpi mpich; do
  [ -x "${LCT[$m]}" ] || { echo "mpi_compare: ${LCT[$m]} not built (docs/mpi.md says how)" >&2; exit 1; }
done
$L init -o "$W/m.h5" --preset "$PRESET" > /dev/null
$L prepare --synthetic passkey --num-docs $((4 * STEPS)) --doc-length "$S" -o "$W/d.h5" > /dev/null
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $PRESET, S = $S, $STEPS steps, $ROUNDS rounds"
for r in $(seq "$ROUNDS"); do
  for layout in "cp 2" "dp 2"; do
    for m in openmpi mpich; do  # each pair back to back
      d="$W/r${r}_${m}_${layout/ /}"
      # shellcheck disable=SC2086
      ${RUN[$m]} "${LCT[$m]}" train --model "$W/m.h5" --data "$W/d.h5" --seq-len "$S" --steps "$STEPS" \
        --${layout/ / } --batch-size "${layout#* }" --checkpoint-every "$((STEPS / 2))" --log-every 1000 \
        --run-dir "$d" > "$d.out" 2>&1 || { tail -5 "$d.out"; exit 1; }
    done
  done
done
/usr/bin/python3 bench/pair_table.py "$W" openmpi mpich "Open MPI" MPICH
