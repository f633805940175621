#!/bin/bash
# The portable build's CPU check: a binary built for a baseline this CPU lacks stops before
# any other code with one line naming what is missing and the cmake option that fixes it;
# one for a baseline the CPU has starts. The probe is app/cpu_baseline.cpp built for
# x86-64-v4 (AVX-512): refused on an AVX2-only CPU, started on an AVX-512 one.
#   tests/jobs/cpu_baseline.sh PROBE
set -uo pipefail
out=$("$1" 2>&1); rc=$?
flags=$(grep -m1 '^flags' /proc/cpuinfo)
if [[ " $flags " == *" avx512f "* && " $flags " == *" avx512bw "* && " $flags " == *" avx512vl "* && " $flags " == *" avx512dq "* ]]; then
  [ "$rc" = 0 ] || { echo "FAIL: an AVX-512 CPU was refused ($rc): $out"; exit 1; }
  echo "PASS: this CPU has AVX-512 and the x86-64-v4 probe started"
else
  [ "$rc" = 1 ] || { echo "FAIL: exit $rc on a CPU without AVX-512: $out"; exit 1; }
  [ "$(echo "$out" | wc -l)" = 1 ] || { echo "FAIL: more than one line: $out"; exit 1; }
  case "$out" in
    "lctrain: error: this CPU lacks AVX-512 (F, BW, VL, DQ), which this build (-march=x86-64-v4) needs; build lctrain for it with cmake -DLCT_ARCH=x86-64-v3"*) ;;
    *) echo "FAIL: message '$out'"; exit 1 ;;
  esac
  echo "PASS: refused with: $out"
fi
