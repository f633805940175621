#!/usr/bin/env bash
# Work balance (--balance cost, docs/balance.md) against today's placement (--balance none) on
# the same cores, rounds alternating the two so that a slow spell of a shared host falls on
# both. Two mixes:
#   extend    the default job's extension stage: passkey documents of 256, 512, 1,024 and
#             2,048 tokens in turn, S = 2,048, dp = 2, batch 1, its model (small, 16 heads),
#             bf16 (inputs/stage3_extend.toml)
#   longtail  copy documents with power-law lengths (density length^-1.5) from 128 to 32,768
#             tokens, S = 32,768, cp = 2 x dp = 2, the tiny model, fp32 (4 ranks: on fewer
#             than 4 cores they share them)
#   longtail-dp  the same on dp = 2 alone (2 ranks)
# Prints each run's figure-of-merit line, then bench/balance_table.py's table: per mix the
# medians over the rounds of each run's throughput (its tokens / its seconds, steps after the
# first), measured imbalance (max/mean busy time), the imbalance the documents predict, the one
# the same tokens would have had under --balance none, and exposed communication.
#   bash bench/balance.sh [MIX ...] [-- STEPS ROUNDS]     (default: extend longtail-dp longtail -- 40 3)
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup balance
mixes=() STEPS=40 ROUNDS=3
while [ $# -gt 0 ] && [ "$1" != -- ]; do mixes+=("$1"); shift; done
[ "${1:-}" = -- ] && { STEPS=${2:-40}; ROUNDS=${3:-3}; }
[ ${#mixes[@]} -gt 0 ] || mixes=(extend longtail-dp longtail)
echo "host: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) CPUs; $STEPS steps, $ROUNDS rounds"

setup() {  # the mix's model, data and train flags
  case "$1" in
    extend)
      $L init -o "$W/extend.h5" --preset small --num-attention-heads 16 --num-key-value-heads 16 > /dev/null
      $L prepare --synthetic passkey --doc-lengths 256,512,1024,2048 --num-docs 2048 --loss-on answers \
        --seq-len 2048 -o "$W/extend-data.h5" > /dev/null
      ranks=2 flags=(--model "$W/extend.h5" --data "$W/extend-data.h5" --dp 2 --seq-len 2048 --batch-size 1
                     --precision bf16 --rope-scaling yarn --rope-factor 8 --rope-original-max-position-embeddings 256) ;;
    longtail|longtail-dp)
      [ -f "$W/longtail.h5" ] || $L init -o "$W/longtail.h5" --preset tiny > /dev/null
      [ -f "$W/longtail-data.h5" ] || $L prepare --synthetic copy --doc-lengths powerlaw:128:32768 --num-docs 4096 \
        --seq-len 32768 -o "$W/longtail-data.h5" > /dev/null
      cp=2; [ "$1" = longtail-dp ] && cp=1
      ranks=$((2 * cp)) flags=(--model "$W/longtail.h5" --data "$W/longtail-data.h5" --cp $cp --dp 2
                               --seq-len 32768 --batch-size 1) ;;
    *) echo "unknown mix '$1': extend, longtail or longtail-dp" >&2; exit 2 ;;
  esac
}

for mix in "${mixes[@]}"; do
  setup "$mix"
  # Two ranks a core when the mix needs more ranks than there are cores.
  over=(); [ "$ranks" -gt "$(nproc)" ] && over=(--oversubscribe)
  for r in $(seq "$ROUNDS"); do
    for b in none cost; do
      d="$W/${mix}_${b}_r$r"
      OMP_NUM_THREADS=$(( $(nproc) / ranks > 0 ? $(nproc) / ranks : 1 )) mpirun "${over[@]}" -n "$ranks" $L train \
        "${over[@]}" "${flags[@]}" --balance "$b" --steps "$STEPS" --checkpoint-every "$STEPS" --log-every 1000 --run-dir "$d" \
        > "$d.out" 2>&1 || { tail -5 "$d.out"; exit 1; }
      echo "$mix --balance $b round $r: $(grep 'figure of merit' "$d.out")"
    done
  done
done

/usr/bin/python3 bench/balance_table.py "$W" "${mixes[@]}"
