# Shared by the jobs/*.sbatch scripts (sourced, not run). Everything can be overridden from
# the environment at sbatch time (sbatch exports it), e.g.
#   LCT_RUN_DIR=/scratch/me/run1 LCT_CP=4 sbatch jobs/one_node.sbatch
# Parallel degrees and sharding, passed as lctrain's flags (cp x dp x tp = the tasks):
#   LCT_TP    --tp, tensor parallelism: every layer split over LCT_TP neighbouring ranks (1)
#   LCT_CP    --cp, context parallelism (the tasks per node / LCT_TP: the ring stays inside
#             a node, on shared memory, and dp spans the nodes)
#   LCT_DP    --dp, data parallelism (0: the tasks / (cp x tp))
#   LCT_ZERO  --zero, the ZeRO stage 0-3 over the dp x cp ranks (0)
#   LCT_TP=2 LCT_ZERO=1 sbatch --ntasks=8 jobs/one_node.sbatch     # tp 2 x cp 4, moments sharded
# Paths are relative to the directory sbatch was called from: submit from the repository.
set -euo pipefail
LCT_ROOT=${LCT_ROOT:-${SLURM_SUBMIT_DIR:-$(pwd)}}
cd "$LCT_ROOT"
LCTRAIN=${LCTRAIN:-$LCT_ROOT/build/app/lctrain}
LCT_CONFIG=${LCT_CONFIG:-$LCT_ROOT/inputs/long_context.toml}
LCT_WORK=${LCT_WORK:-$LCT_ROOT/runs/slurm}             # model and dataset, made once if missing
LCT_MODEL=${LCT_MODEL:-$LCT_WORK/model.h5}
LCT_DATA=${LCT_DATA:-$LCT_WORK/passkey.h5}
LCT_RUN_DIR=${LCT_RUN_DIR:-$LCT_WORK/run-${SLURM_JOB_NAME:-job}}
# Parallel degrees: flags of lctrain, with Slurm's task count as the default.
LCT_TP=${LCT_TP:-1}
LCT_TASKS_PER_NODE=${SLURM_NTASKS_PER_NODE:-$(( ${SLURM_NTASKS:-1} / ${SLURM_JOB_NUM_NODES:-1} ))}
LCT_CP=${LCT_CP:-$(( LCT_TASKS_PER_NODE / (LCT_TP > 0 ? LCT_TP : 1) ))}
LCT_DP=${LCT_DP:-0}                                   # 0: ranks / (cp x tp)
LCT_ZERO=${LCT_ZERO:-0}
read -r -a LCT_EXTRA <<< "${LCT_TRAIN_ARGS:-}"         # more train flags, e.g. "--steps 2000"

[ -x "$LCTRAIN" ] || { echo "lctrain not found at $LCTRAIN: build it (bash jobs/quickstart.sh run) or set LCTRAIN" >&2; exit 1; }

# The model and dataset of the default job, made by one process before the parallel launch.
make_inputs() {
  mkdir -p "$LCT_WORK"
  [ -f "$LCT_MODEL" ] || "$LCTRAIN" --config "$LCT_CONFIG" init --out "$LCT_MODEL"
  [ -f "$LCT_DATA" ] || "$LCTRAIN" --config "$LCT_CONFIG" prepare --out "$LCT_DATA"
}

# One rank per task, bound to the task's cores; a rank that dies kills the step.
# srun of Slurm 22.05-23.02 does not inherit sbatch's --cpus-per-task: without it every rank
# would get one CPU (and one thread). SRUN_CPUS_PER_TASK and the explicit flag cover both.
# On SMT nodes --cpus-per-task counts hardware threads: OMP_NUM_THREADS is left unset, so
# that lctrain runs one thread per physical core of its CPUs (LCT_THREADS sets a count).
# LCT_SRUN_MPI is srun's MPI plugin: pmix for Open MPI, pmi2 for MPICH, Intel MPI and
# MVAPICH, cray_shasta (or none) for Cray MPICH. SRUN_ARGS adds srun flags (sweep: --ntasks).
# Every job script launches through here.
LCT_SRUN_MPI=${LCT_SRUN_MPI:-pmix}
SRUN_ARGS=()
launch() {
  local cpt=${SLURM_CPUS_PER_TASK:-1}
  unset OMP_NUM_THREADS OMP_PLACES OMP_PROC_BIND
  export SRUN_CPUS_PER_TASK=$cpt
  srun --mpi="$LCT_SRUN_MPI" --cpus-per-task="$cpt" --cpu-bind=cores --kill-on-bad-exit=1 "${SRUN_ARGS[@]}" \
    "$LCTRAIN" "$@"
}

# Exits 1 with the fix when LCT_RUN_DIR holds a run that has reached its --steps: a job
# submitted again over a finished run would otherwise end at once with exit 0.
refuse_a_finished_run() {
  local log=$1
  if grep -q "the run is already complete" "$log"; then
    echo "error: $LCT_RUN_DIR holds a finished run: set a new LCT_RUN_DIR, or raise --steps in LCT_TRAIN_ARGS to continue it" >&2
    exit 1
  fi
}

# TRAIN_ARGS: the train command line from the settings above (call again after changing them).
train_args() {
  TRAIN_ARGS=(--config "$LCT_CONFIG" train --model "$LCT_MODEL" --data "$LCT_DATA"
              --run-dir "$LCT_RUN_DIR" --cp "$LCT_CP" --dp "$LCT_DP" --tp "$LCT_TP" --zero "$LCT_ZERO"
              "${LCT_EXTRA[@]}")
}

# Seconds left in this job ("squeue %L": [D-]HH:MM:SS, MM:SS, or UNLIMITED).
remaining_seconds() {
  local left d=0 h=0 m=0 s=0
  left=$(squeue -h -j "$SLURM_JOB_ID" -o %L 2>/dev/null || echo UNLIMITED)
  case "$left" in UNLIMITED|NOT_SET|INVALID|"") echo 0; return ;; esac
  [[ $left == *-* ]] && { d=${left%%-*}; left=${left#*-}; }
  IFS=: read -r -a p <<< "$left"
  case ${#p[@]} in 3) h=${p[0]}; m=${p[1]}; s=${p[2]} ;; 2) m=${p[0]}; s=${p[1]} ;; 1) s=${p[0]} ;; esac
  echo $(( 10#$d * 86400 + 10#$h * 3600 + 10#$m * 60 + 10#$s ))
}

# LIMIT_ARGS: --time-limit for lctrain, a minute before the job's end (none when unlimited).
time_limit_args() {
  local left
  left=$(remaining_seconds)
  LIMIT_ARGS=()
  if [ "$left" -gt 120 ]; then LIMIT_ARGS=(--time-limit "$(( left - 60 ))"); fi
}
