# Sourced by the bench scripts. bench_setup NAME: runs from the repository root, in a user's
# default environment (these build machines export OPENBLAS_CORETYPE, a user's shell does
# not), lets mpirun start as root, sets L to the built lctrain and W to a scratch folder
# that is removed at exit (KEEP=1 keeps it and prints where it is).
bench_setup() {
  cd "$(dirname "${BASH_SOURCE[1]}")/.."
  unset OPENBLAS_CORETYPE
  export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
  L=build/app/lctrain
  W=$(mktemp -d "/tmp/lct_$1.XXXXXX")
  if [ "${KEEP:-0}" = 1 ]; then echo "runs in $W"; else trap 'rm -rf "$W"' EXIT; fi
}

# in_memory_cgroup GIB CMD...: runs CMD in a fresh memory cgroup limited to GIB GiB (cgroup v2,
# else v1's memory controller; swap limited alike where v1 accounts it), as a smaller node
# would hold it; GIB 0 runs CMD as it is. Needs root. Returns CMD's exit status.
in_memory_cgroup() {
  local gib=$1
  shift
  if [ "$gib" = 0 ]; then "$@"; return; fi
  local bytes dir
  bytes=$(/usr/bin/python3 -c "print(int($gib * 2**30))")
  if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
    dir=/sys/fs/cgroup/lct_bench_$$
    mkdir "$dir" && echo "$bytes" > "$dir/memory.max" && echo 0 > "$dir/memory.swap.max" 2>/dev/null || true
  else
    dir=/sys/fs/cgroup/memory/lct_bench_$$
    mkdir "$dir" && echo "$bytes" > "$dir/memory.limit_in_bytes"
    [ -f "$dir/memory.memsw.limit_in_bytes" ] && echo "$bytes" > "$dir/memory.memsw.limit_in_bytes"
  fi
  local rc=0
  # shellcheck disable=SC2016  # $$ and $1 belong to the inner shell
  bash -c 'echo $$ > "$1/cgroup.procs"; shift; exec "$@"' _ "$dir" "$@" || rc=$?
  rmdir "$dir" 2>/dev/null || true
  return "$rc"
}
