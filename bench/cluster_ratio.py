#!/usr/bin/python3
"""Context parallelism across emulated nodes linked at a cluster's network-to-compute ratio
(tests/cluster/cluster.py: a network and UTS namespace per node, its own CPUs, veth links
shaped with tbf; no added latency). For each sequence length:
  one node    N ranks on this machine, a core each (ring hops over shared memory),
  N nodes     one rank per node (every ring hop over a shaped link),
with median tokens/s, exposed communication and the checkpoint time of each; then dp = N
across the nodes (the gradient all-reduce over the links); and `lctrain plan`'s predicted
step for its layouts on those nodes and links beside the measured one.
The link rate: the node's measured fp32 FMA peak x 100 Gb/s per 3 TFLOP/s (a 64-core node of
about 3 TFLOP/s with a 100 Gb/s link), unless --rate is given.
--mpi mpich runs build-mpich/app/lctrain under MPICH's hydra (mpiexec.mpich; one node with
-bind-to core, as mpirun binds by default; across nodes as tests/cluster/cluster.py launches it)
instead of build/app/lctrain under Open MPI's mpirun.
    sudo /usr/bin/python3 bench/cluster_ratio.py [--nodes 2] [--lens 16384,32768,65536]
        [--steps 3] [--preset tiny] [--rate auto|4gbit] [--mpi openmpi|mpich]
"""
import argparse
import os
import re
import statistics as st
import subprocess
import sys
import tempfile

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "tests", "cluster"))
from cluster import Cluster  # noqa: E402
from cp_table import row  # noqa: E402

BUILD = {"openmpi": "build", "mpich": "build-mpich"}
# One node, outside the emulated network: mpirun binds each rank to a core by default; hydra
# binds nothing unless asked.
ONE_NODE = {"openmpi": ["mpirun"], "mpich": ["mpiexec.mpich", "-bind-to", "core"]}
L = None  # lctrain of the MPI chosen (--mpi)
ENV = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_CORETYPE", "OMP_NUM_THREADS")}
ENV.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")


def lct(*args):
    r = subprocess.run([L, *map(str, args)], capture_output=True, text=True, env=ENV)
    if r.returncode:
        sys.exit(f"cluster_ratio: lctrain {' '.join(map(str, args))} failed:\n{r.stderr[-2000:]}")
    return r.stdout


HUNG = []  # the runs whose launcher hung in MPI_Finalize after the run was written


def on_nodes(c, argv, run_dir):
    """The output of argv (run dir run_dir) on the nodes, one rank each. A launcher left hanging in
    MPI_Finalize once the run's files are written (MPICH 4.0 over UCX's TCP: Cluster.mpiexec_argv
    in tests/cluster/cluster.py) is ended after 15 s and noted; the run's figures stand."""
    rc, text = c.run([*argv, "--run-dir", run_dir], 1, finished=f"wrote {run_dir}/timing.h5", grace=15)
    if rc == Cluster.HUNG:
        HUNG.append(run_dir)
    return text


def checkpoint_s(text):
    return [float(s) for s in re.findall(r"checkpoint \S+: [\d.]+ \S+ in ([\d.]+) s", text)]


def summary(run_dir, text):
    if not os.path.exists(os.path.join(run_dir, "timing.h5")):
        sys.exit(f"cluster_ratio: the run {run_dir} failed:\n{text[-3000:]}")
    r = row(run_dir)
    ck = checkpoint_s(text)
    return dict(tps=r["tps"], comm=r.get("comm", 0.0), ck=max(ck) if ck else float("nan"),
                step=1.0 / r["tps"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=2)
    ap.add_argument("--lens", default="16384,32768,65536")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--rate", default="auto")
    ap.add_argument("--mpi", default="openmpi", choices=Cluster.MPIS)
    a = ap.parse_args()
    global L
    L = os.path.abspath(os.path.join(here, "..", BUILD[a.mpi], "app", "lctrain"))
    if not os.access(L, os.X_OK):
        sys.exit(f"cluster_ratio: no lctrain built with {a.mpi} at {L}")
    n = a.nodes
    w = tempfile.mkdtemp(prefix="lct_cluster_ratio.")
    os.chdir(w)
    lct("init", "-o", "m.h5", "--preset", a.preset)
    lens = [int(s) for s in a.lens.split(",")]
    for S in lens:
        lct("prepare", "--synthetic", "passkey", "--num-docs", a.steps + 1, "--doc-length", S, "-o", f"d{S}.h5")
    with Cluster(nodes=n) as probe:  # unshaped, to read one node's peak
        out = subprocess.run(probe.on_node(0, [L, "train", "--model", "m.h5", "--data", f"d{lens[0]}.h5",
                                                "--seq-len", "1024", "--steps", "1", "--run-dir", "peak"]),
                             capture_output=True, text=True, env=ENV).stdout
        cores = len(probe.cpus[0])
    peak = float(re.search(r"peak: fp32 ([\d.]+) GFLOP/s per rank", out).group(1))
    rate = a.rate if a.rate != "auto" else f"{max(0.1, peak * 100 / 3000):.2f}gbit"
    gbs = float(re.match(r"([\d.]+)", rate).group(1)) / 8 * (1000 if rate.endswith("tbit") else 1)
    print(f"{a.mpi} ({L}); {n} nodes x {cores} core(s); node fp32 peak {peak:.1f} GFLOP/s (measured); link {rate} "
          f"({gbs:.3f} GB/s) each way, no added latency; {a.preset}, {a.steps} steps, medians after the first")
    common = ["--threads", "1", "train", "--model", "m.h5", "--seq-len"]
    rows = []
    with Cluster(nodes=n, rate=rate, mpi=a.mpi) as c:
        for S in lens:
            args = ["--data", f"d{S}.h5", "--steps", a.steps, "--checkpoint-every", a.steps, "--log-every", 1000,
                    "--cp", n]
            # One node: the N ranks on this machine's cores (one each), outside the emulated network.
            one = subprocess.run([*ONE_NODE[a.mpi], "-n", str(n), L, *common, str(S), *map(str, args), "--run-dir",
                                  f"one{S}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=ENV).stdout
            many = on_nodes(c, [L, *common, S, *args], f"nodes{S}")
            uly = on_nodes(c, [L, *common, S, *args, "--cp-algo", "ulysses"], f"uly{S}")
            rows.append((S, summary(f"one{S}", one), summary(f"nodes{S}", many), summary(f"uly{S}", uly)))
        S = lens[0]
        dp = on_nodes(c, [L, *common, S, "--data", f"d{S}.h5", "--steps", a.steps, "--dp", n,
                          "--checkpoint-every", a.steps, "--log-every", 1000], "dp")
        dps = summary("dp", dp)
    print("| S | one node: tokens/s | exposed comm | checkpoint | nodes: tokens/s | exposed comm | checkpoint | "
          "checkpoint ratio |")
    print("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for S, o, m, _ in rows:
        print(f"| {S:,} | {o['tps']:,.1f} | {100 * o['comm']:.2f}% | {o['ck']:.3f} s | {m['tps']:,.1f} | "
              f"{100 * m['comm']:.2f}% | {m['ck']:.3f} s | {m['ck'] / o['ck']:.2f} |")
    import h5py
    with h5py.File("dp/timing.h5", "r") as f:
        s = {k: f["steps"][k][()] for k in ("allreduce_s", "seconds")}
    frac = st.median(s["allreduce_s"][1:] / s["seconds"][1:]) if len(s["seconds"]) > 1 else float("nan")
    print(f"dp = {n} across the nodes at S = {lens[0]:,}: {dps['tps']:,.1f} tokens/s, checkpoint {dps['ck']:.3f} s, "
          f"gradient all-reduce {100 * frac:.2f}% of the step (median)")
    print("plan's prediction beside the measured step (N nodes, one rank each):")
    for S, _, ring, uly in rows:
        p = lct("plan", "--preset", a.preset, "--seq-len", S, "--nodes", n, "--cores-per-node", cores,
                "--inter-gbs", f"{gbs:.4f}", "--inter-latency-us", "10", "--precision", "fp32",
                "--checkpointing", "none", "--zero", "0", "--top", "3")
        for line in p.splitlines():
            f = line.split()
            if len(f) > 3 and f[0].isdigit() and re.match(r"[\d.]+$", f[1]) and "--cp-algo" in line:
                algo = line.split("--cp-algo ")[1].split()[0]
                measured = {"ring": ring, "ulysses": uly}.get(algo)
                if f"--cp {n} " not in line or measured is None:
                    print(f"  S = {S:,} #{f[0]}: predicted {float(f[1]):.2f} s, not measured ({line.split('train ')[-1]})")
                    continue
                step = S / measured["tps"]
                print(f"  S = {S:,} #{f[0]} --cp {n} --cp-algo {algo}: predicted {float(f[1]):.2f} s, measured "
                      f"{step:.2f} s (exposed comm {100 * measured['comm']:.2f}%): predicted / measured "
                      f"{float(f[1]) / step:.2f}")
    if HUNG:
        print(f"note: the launcher hung in MPI_Finalize after the runs {', '.join(HUNG)} were written "
              "(MPICH 4.0 over UCX's TCP); ended after 15 s, their figures above stand")
    print(f"runs in {w}")


if __name__ == "__main__":
    main()
