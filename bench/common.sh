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
