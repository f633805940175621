#!/bin/bash
# jobs/common.sh turns its variables into lctrain's flags: LCT_TP and LCT_ZERO reach --tp and
# --zero as LCT_CP and LCT_DP reach --cp and --dp, cp defaults to the tasks / tp, and the
# command line a job would launch is accepted by lctrain (train --dry-run on 4 ranks, dp 2 x
# tp 2 under --zero 3). No Slurm needed: SLURM_NTASKS is set by hand.
#   tests/jobs/common_args.sh SOURCE_DIR LCTRAIN MPIEXEC
set -euo pipefail
src=$(cd "$1" && pwd)
lctrain=$(cd "$(dirname "$2")" && pwd)/$(basename "$2")
mpiexec=$3
work=$(mktemp -d /tmp/lct_jobs_args.XXXXXX)
trap 'rm -rf "$work"' EXIT

# The TRAIN_ARGS that common.sh builds under the environment given, flags from --cp on.
args() {
  env -i PATH="$PATH" HOME="${HOME:-/root}" LCT_ROOT="$src" LCTRAIN="$lctrain" LCT_WORK="$work" "$@" \
    bash -c 'source "$LCT_ROOT/jobs/common.sh"; train_args; a="${TRAIN_ARGS[*]}"; echo "--cp ${a#*--cp }"'
}
expect() {  # expect WANTED VAR=VALUE...
  local want=$1; shift
  local got; got=$(args "$@")
  [ "$got" = "$want" ] || { echo "FAIL: $* -> '$got', wanted '$want'"; exit 1; }
  echo "ok: ${*:-(nothing set)} -> $got"
}
expect "--cp 1 --dp 0 --tp 1 --zero 0"
expect "--cp 4 --dp 0 --tp 1 --zero 0" SLURM_NTASKS=4
expect "--cp 4 --dp 0 --tp 2 --zero 1" SLURM_NTASKS=8 LCT_TP=2 LCT_ZERO=1
expect "--cp 1 --dp 2 --tp 2 --zero 3 --steps 2" SLURM_NTASKS=4 LCT_TP=2 LCT_CP=1 LCT_DP=2 LCT_ZERO=3 \
  LCT_TRAIN_ARGS="--steps 2"
# Several nodes: cp stays inside a node (ranks per node / tp) and dp spans the nodes.
expect "--cp 2 --dp 0 --tp 1 --zero 0" SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=4 SLURM_NTASKS_PER_NODE=2
expect "--cp 4 --dp 0 --tp 1 --zero 0" SLURM_NTASKS=8 SLURM_JOB_NUM_NODES=2
expect "--cp 2 --dp 0 --tp 2 --zero 0" SLURM_NTASKS=16 SLURM_JOB_NUM_NODES=4 LCT_TP=2
expect "--cp 8 --dp 0 --tp 1 --zero 0" SLURM_NTASKS=16 SLURM_JOB_NUM_NODES=2 LCT_CP=8

# The launch line: srun's MPI plugin from LCT_SRUN_MPI (pmix by default), and no
# OMP_NUM_THREADS from the caller's shell (lctrain runs one thread per physical core).
launch_line() {
  mkdir -p "$work/bin"
  printf '#!/bin/bash\necho "srun $* OMP_NUM_THREADS=${OMP_NUM_THREADS:-unset}"\n' > "$work/bin/srun"
  chmod +x "$work/bin/srun"
  env -i PATH="$work/bin:$PATH" HOME="${HOME:-/root}" LCT_ROOT="$src" LCTRAIN="$lctrain" LCT_WORK="$work" \
    SLURM_CPUS_PER_TASK=4 OMP_NUM_THREADS=8 "$@" bash -c 'source "$LCT_ROOT/jobs/common.sh"; launch x'
}
line=$(launch_line)
case "$line" in *"--mpi=pmix --cpus-per-task=4"*"OMP_NUM_THREADS=unset") echo "ok: $line" ;;
  *) echo "FAIL: launch line '$line'"; exit 1 ;; esac
line=$(launch_line LCT_SRUN_MPI=pmi2)
case "$line" in *"--mpi=pmi2 "*) echo "ok: $line" ;; *) echo "FAIL: LCT_SRUN_MPI=pmi2 gave '$line'"; exit 1 ;; esac
# A finished run in LCT_RUN_DIR is refused with the fix, not passed with exit 0.
echo "the run is already complete: step 2 of --steps 2" > "$work/finished.log"
if msg=$(env -i PATH="$PATH" HOME="${HOME:-/root}" LCT_ROOT="$src" LCTRAIN="$lctrain" LCT_WORK="$work" \
         bash -c 'source "$LCT_ROOT/jobs/common.sh"; refuse_a_finished_run "$LCT_WORK/finished.log"' 2>&1); then
  echo "FAIL: a finished run was not refused"; exit 1
fi
case "$msg" in *"holds a finished run: set a new LCT_RUN_DIR, or raise --steps"*) echo "ok: $msg" ;;
  *) echo "FAIL: '$msg'"; exit 1 ;; esac

# lctrain takes that command line: dp 2 x tp 2 with ZeRO-3 (a model with 260 vocabulary rows,
# which tp 2 splits).
cd "$work"
"$lctrain" init --preset tiny --vocab-size 260 -o model.h5 > /dev/null
"$lctrain" prepare --synthetic passkey --num-docs 8 --doc-length 300 -o data.h5 > /dev/null
read -r -a cmd <<< "$(env -i PATH="$PATH" HOME="${HOME:-/root}" LCT_ROOT="$src" LCTRAIN="$lctrain" \
  LCT_WORK="$work" LCT_MODEL="$work/model.h5" LCT_DATA="$work/data.h5" LCT_RUN_DIR="$work/run" \
  SLURM_NTASKS=4 LCT_TP=2 LCT_CP=1 LCT_ZERO=3 LCT_TRAIN_ARGS="--seq-len 600 --block-q 32 --block-k 32" \
  bash -c 'source "$LCT_ROOT/jobs/common.sh"; train_args; echo "${TRAIN_ARGS[*]}"')"
out=$(env OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=1 \
      "$mpiexec" --oversubscribe -n 4 "$lctrain" --oversubscribe "${cmd[@]}" --dry-run 2>&1) ||
  { echo "$out" | tail -20; echo "FAIL: lctrain refused the job's command line"; exit 1; }
echo "$out" | grep -E "rank layout|memory estimate|dry run"
echo "$out" | grep -q "rank layout (dp=2 x cp=1 x tp=2)" || { echo "FAIL: not dp 2 x tp 2"; exit 1; }
echo "$out" | grep -q "AdamW [0-9.]* GiB (1/2 of it: --zero 3)" || { echo "FAIL: the memory table does not name --zero 3"; exit 1; }
echo "PASS"
