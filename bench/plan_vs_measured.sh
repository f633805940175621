#!/usr/bin/env bash
# `lctrain plan` against real runs on this node: bench/plan_sweep.sh (the plan, then its top N
# layouts trained for STEPS steps each), then bench/plan_table.py's table of predicted against
# measured step time and memory per rank.
#   bash bench/plan_vs_measured.sh [PRESET] [S] [GLOBAL_BATCH] [N] [STEPS] [PRECISIONS]
set -euo pipefail
source "$(dirname "$0")/common.sh"
bench_setup plan
LCTRAIN=$PWD/$L bash bench/plan_sweep.sh "$W/sweep" "${1:-30m}" "${2:-4096}" "${3:-2}" "${4:-4}" "${5:-4}" \
  "${6:-fp32,bf16}"
/usr/bin/python3 bench/plan_table.py "$W/sweep"
