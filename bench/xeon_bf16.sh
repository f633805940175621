#!/usr/bin/env bash
# bf16 against fp32 on one node with a matrix engine (a Xeon with AMX), with nothing but bash,
# coreutils and lctrain, so it runs inside the packed tree of ../shared/tools/bigbox: the
# attention kernel alone (fused and oneDNN paths, fp32 and bf16) and the PRESET model's training
# at each S in fp32, in bf16 with --attention-kernel auto (its start-up line says what it timed
# and took) and in bf16 forced to the fused path. Every log lands in OUTDIR and is packed into
# OUTDIR/runs.tar; the most important runs go first, so a run cut short still leaves them.
#   bash bench/xeon_bf16.sh OUTDIR THREADS "S ..." [STEPS] [PRESET]
# With BASE=NAME (another build on the PATH, e.g. the lctrain-base that bigbox_pack.sh's BASELINE
# packs), that build's oneDNN attention and bf16 training run too, last, on the same machine:
# lent machines of one kind differ by 5-10%, so a before/after comparison belongs in one call.
# The PyTorch peer runs outside the tree with the machine's python3, on the same files:
#   python3 torch2_train.py --model OUTDIR/model.h5 --data OUTDIR/dataS.h5 --seq-len S --bf16
set -uo pipefail
OUT=$1; THREADS=$2; LENS=$3; STEPS=${4:-4}; PRESET=${5:-30m}
unset OPENBLAS_CORETYPE
here=$(cd "$(dirname "$0")/.." && pwd)
L=${LCTRAIN:-$here/build/app/lctrain}
[ -x "$L" ] || L=$(command -v lctrain) || { echo "xeon_bf16: no lctrain (set LCTRAIN)" >&2; exit 1; }
mkdir -p "$OUT"
"$L" init -o "$OUT/model.h5" --preset "$PRESET" --force > /dev/null || exit 1

# one command, its log kept, its summary lines echoed (no grep in the packed tree)
run() {
  local name=$1; shift
  echo "== $name: $*"
  local start; start=$(date +%s)
  timeout 300 "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  while read -r line; do
    case $line in
      "figure of merit"* | "attention kernel:"* | "peak for MFU"* | "warning"* | "error"* | [0-9]*) echo "   $line" ;;
    esac
  done < "$OUT/$name.log"
  echo "   [exit $rc, $(($(date +%s) - start)) s]"
}

bench_attention() {  # PRECISION KERNEL  (the build: $TRAINER, default lctrain)
  run "${PREFIX:-}attn_$1_$2" "${TRAINER:-$L}" --threads "$THREADS" bench attention --seq-len "${LENS// /,}" --heads 8 \
    --kv-heads 2 --head-dim 64 --precision "$1" --attention-kernel "$2"
}

train() {  # NAME S PRECISION [FLAGS...]  (the build: $TRAINER, default lctrain)
  local name=$1 S=$2 precision=$3; shift 3
  run "S${S}_$name" "${TRAINER:-$L}" --threads "$THREADS" train --model "$OUT/model.h5" --data "$OUT/data$S.h5" \
    --seq-len "$S" --steps "$STEPS" --precision "$precision" --log-every 1 --run-dir "$OUT/S${S}_$name" --force "$@"
}

lscpu > "$OUT/lscpu.txt" 2>&1
bench_attention bf16 onednn
bench_attention bf16 fused
bench_attention fp32 fused
for S in $LENS; do
  "$L" prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$OUT/data$S.h5" --force > /dev/null
done
for S in $LENS; do
  train bf16_auto "$S" bf16
  train fp32 "$S" fp32
  train bf16_fused "$S" bf16 --attention-kernel fused
done
if [ -n "${BASE:-}" ]; then
  TRAINER=$(command -v "$BASE") || { echo "xeon_bf16: no $BASE on the PATH" >&2; exit 1; }
  PREFIX=base_ bench_attention bf16 onednn
  for S in $LENS; do train base_bf16_auto "$S" bf16; done
fi
(cd "$OUT" && tar -cf runs.tar --exclude='*/checkpoints' ./*.log lscpu.txt S*/timing.h5)
echo "wrote $OUT/runs.tar"
