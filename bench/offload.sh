#!/usr/bin/env bash
# Memory tiers on the same cores: one model trained with its activations and/or its AdamW
# moments in memory or on a local disk. Prints, per run, the median step time over the steps
# after the first, the update's time (optimizer_s, its reads and writes included), the waits
# for the activation tier (offload_s) and the peak resident memory (/usr/bin/time).
#   bash bench/offload.sh "INIT FLAGS" SEQ_LEN STEPS "CONFIG ..."    (from the repository root)
# CONFIG is WHAT:POLICY:PRECISION[:TILE], WHAT one of mem (everything in memory), act
# (--offload-activations), opt (--offload-optimizer) or both; POLICY a --checkpointing policy;
# TILE a --mlp-tile (default 0, untiled). Each run also prints its start-up memory estimate.
# Examples:
#   bash bench/offload.sh "--preset 30m" 8192 4 "mem:none:fp32 act:none:fp32 mem:full:fp32"
#   bash bench/offload.sh "--hidden-size 2048 --intermediate-size 8192 --num-hidden-layers 16 \
#     --num-attention-heads 32 --num-key-value-heads 8 --vocab-size 128256 --tie-word-embeddings true" \
#     4096 2 "opt:full:bf16"                                     # a Llama-3.2-1B shape
# The tier is a folder of the scratch folder (on /tmp's file system); TIER=DIR puts it elsewhere.
# LIMIT_GIB=G runs each training in a memory cgroup of G GiB (cgroup v1 or v2, as root), so that
# a run that does not fit is refused by the estimate or killed (reported as such).
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup offload
INIT=$1; S=$2; STEPS=$3; CONFIGS=$4
TIER=${TIER:-$W/tier}
mkdir -p "$TIER"
# shellcheck disable=SC2086  # INIT is a list of flags
$L init -o "$W/m.h5" $INIT > /dev/null
$L prepare --synthetic passkey --num-docs $((STEPS + 1)) --doc-length "$S" -o "$W/d.h5" > /dev/null
for c in $CONFIGS; do
  IFS=: read -r what policy precision tile <<< "$c"
  flags=(--mlp-tile "${tile:-0}")
  case $what in
    mem) ;;
    act) flags+=(--offload-activations "$TIER") ;;
    opt) flags+=(--offload-optimizer "$TIER") ;;
    both) flags+=(--offload-activations "$TIER" --offload-optimizer "$TIER") ;;
    *) echo "offload.sh: '$c': WHAT is mem, act, opt or both" >&2; exit 2 ;;
  esac
  run="$W/${c//:/_}"
  rc=0
  in_memory_cgroup "${LIMIT_GIB:-0}" /usr/bin/time -f "%M" -o "$run.rss" $L train --model "$W/m.h5" --data "$W/d.h5" \
    --run-dir "$run" --seq-len "$S" --steps "$STEPS" --checkpointing "$policy" --precision "$precision" \
    "${flags[@]}" > "$run.log" 2>&1 || rc=$?
  est=$(grep -o "memory estimate per rank ([a-z0-9]*): [0-9.]* GiB" "$run.log" | grep -o "[0-9.]* GiB" || true)
  if [ "$rc" != 0 ]; then
    echo "$(printf '%16s' "$c"): did not train (exit $rc; estimate ${est:-none}): $(grep -m1 -o "error: .\{0,160\}" "$run.log" || tail -1 "$run.log")"
    continue
  fi
  /usr/bin/python3 - "$run" "$c" "$est" <<'PY'
import sys, h5py, numpy as np
run, name, est = sys.argv[1], sys.argv[2], sys.argv[3]
with h5py.File(f"{run}/timing.h5") as f:
    s = f["steps"]
    keep = slice(1, None) if len(s["step"]) > 1 else slice(0, None)
    med = lambda k: float(np.median(s[k][keep]))
    print(f"{name:>16}: step {med('seconds'):.2f} s, optimizer_s {med('optimizer_s'):.2f}, offload_s "
          f"{med('offload_s'):.3f}, {med('tokens_per_s'):.1f} tokens/s, peak resident "
          f"{int(open(run + '.rss').read().split()[-1]) / 2**20:.2f} GiB, estimate {est}")
PY
done
