#!/usr/bin/env bash
# Weak and strong scaling to 64, 256 and 1,024 nodes, predicted by `lctrain plan` from the
# per-core compute rates it measures on this machine and the given network: the 30m preset
# and a 1B Llama shape (hidden 2048, 16 layers, 32 heads / 8 KV heads, intermediate 8192,
# vocabulary 128,256, tied embeddings) at 128K to 1M tokens. Prints plan's best layout per row.
#   bash bench/scaling_table.sh [CORES_PER_NODE=64] [MEM_PER_NODE_GIB=256] [INTER_GBS=12.5] [LATENCY_US=2]
# Assumptions (printed with the table): every node's cores compute at this machine's measured
# per-core rates; links of INTER_GBS GB/s per node with LATENCY_US per message; plan's
# models of the ring, the gradient all-reduce and AdamW (docs/planning.md).
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup scaling
CORES=${1:-64}
MEM=${2:-256}
GBS=${3:-12.5}
LAT=${4:-2}
$L init -o "$W/30m.h5" --preset 30m > /dev/null
$L init -o "$W/1b.h5" --preset 30m --hidden-size 2048 --intermediate-size 8192 --num-hidden-layers 16 \
  --num-attention-heads 32 --num-key-value-heads 8 --vocab-size 128256 --tie-word-embeddings true \
  --max-position-embeddings 1048576 > /dev/null
best() {  # best MODEL NODES SEQ_LEN GLOBAL_BATCH: "step_s tokens/s GiB/rank layout"
  $L plan --model "$W/$1.h5" --nodes "$2" --seq-len "$3" --global-batch "$4" --cores-per-node "$CORES" \
    --mem-per-node "$MEM" --inter-gbs "$GBS" --inter-latency-us "$LAT" --top 1 2>&1 |
    awk '/^ *1 +[0-9.]+ +[0-9]+/ {lay=$0; sub(/.*x --threads/, "--threads", lay); print $2, $3, $4, lay; f=1}
         END {if (!f) print "- - - no layout fits"}'
}
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs); nodes of $CORES cores at this machine's per-core rates, $MEM GiB, links $GBS GB/s, $LAT us"
echo
echo "| model | scaling | nodes | S | global batch | step s | tokens/s | tokens/s per node | GiB/rank | plan's best layout |"
echo "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
for m in ${MODELS:-30m 1b}; do  # MODELS=1b: one model's rows only
  for S in 131072 1048576; do
    for n in 64 256 1024; do   # weak: one sequence per 64 nodes
      read -r step tps gib lay <<< "$(best "$m" "$n" "$S" $((n / 64)))"
      per=$([ "$tps" = - ] && echo - || echo $((tps / n)))
      echo "| $m | weak | $n | $S | $((n / 64)) | $step | $tps | $per | $gib | $lay |"
    done
    for n in 64 256 1024; do   # strong: 16 sequences whatever the nodes
      read -r step tps gib lay <<< "$(best "$m" "$n" "$S" 16)"
      per=$([ "$tps" = - ] && echo - || echo $((tps / n)))
      echo "| $m | strong | $n | $S | 16 | $step | $tps | $per | $gib | $lay |"
    done
  done
done
