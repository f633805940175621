#!/usr/bin/python3
"""lctrain across emulated nodes with their own network (tests/cluster/cluster.py): network
and UTS namespaces joined by shaped veth links, each node on its own CPUs. The layout (cp
inside a node, dp across nodes), the ring's hops (shared memory inside, MPI across), losses
equal to one node's, a checkpoint written across nodes and resumed on another number of
nodes, and a node lost in the middle of a run; and the same nodes launched by MPICH's hydra.
Needs root; skipped with one line otherwise. Run by ctest as cluster.CASE; the helpers are
tests/cli/cli_cases.py's. The MPICH case runs the MPICH build of lctrain: --mpich-build DIR
(tests/CMakeLists.txt may pass LCT_SECOND_MPI_BUILD), else the source tree's build-mpich/
(jobs/quickstart.sh test makes it there), with the mpiexec that build was configured with."""
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time

import h5py

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "cli"))
import cli_cases as cc  # noqa: E402
from cli_cases import case, ok, timing  # noqa: E402
from cluster import Cluster, Unavailable  # noqa: E402
from parallel_cases import assert_same_losses  # noqa: E402

RATE = "1gbit"  # enough for the tiny model's hops; the measurements choose theirs (bench/cluster_ratio.sh)
TRAIN = ["train", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600", "--lr", "3e-3", "--warmup-steps", "2",
         "--block-q", "32", "--block-k", "32", "--peak-gflops", "100"]


MPICH_BUILD = None  # --mpich-build DIR, taken off the command line before cli_cases.main


@contextlib.contextmanager
def cluster(nodes, mpi="openmpi", mpiexec=None):
    """The emulated nodes, or the case skipped with the reason this machine cannot host them."""
    if mpi == "openmpi" and cc.MPI_FAMILY != "openmpi":
        raise cc.Skip("the emulated nodes are launched with Open MPI's mpirun and its rsh agent")
    try:
        c = Cluster(nodes=nodes, rate=RATE, mpi=mpi, mpiexec=mpiexec).__enter__()
    except Unavailable as e:
        raise cc.Skip(str(e))
    try:
        yield c
    finally:
        c.close()


def fixture():
    cc.good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "16", "--doc-length", "300", "-o", "d16.h5")


def lct(*args):
    return [cc.LCTRAIN, "--oversubscribe", *map(str, args)]


def mpich():
    """(lctrain, mpiexec) of the MPICH build, or the case skipped with one line naming what is
    missing. Under --mpi-family mpich they are the ones given; otherwise the build is
    --mpich-build or the source tree's build-mpich/, its mpiexec the one in its CMakeCache.txt
    (else mpiexec.mpich on PATH)."""
    if cc.MPI_FAMILY == "mpich":
        lctrain, mpiexec = cc.LCTRAIN, cc.MPIEXEC
    else:
        build = os.path.abspath(MPICH_BUILD or os.path.join(here, "..", "..", "build-mpich"))
        lctrain, mpiexec = os.path.join(build, "app", "lctrain"), "mpiexec.mpich"
        with contextlib.suppress(OSError), open(os.path.join(build, "CMakeCache.txt")) as f:
            cached = re.search(r"^MPIEXEC_EXECUTABLE:\w+=(.+)$", f.read(), re.M)
            mpiexec = cached.group(1).strip() if cached else mpiexec
    if not os.access(lctrain, os.X_OK):
        raise cc.Skip(f"no MPICH build of lctrain at {lctrain} (jobs/quickstart.sh test, or --mpich-build DIR)")
    if not shutil.which(mpiexec):
        raise cc.Skip(f"no MPICH launcher {mpiexec} (apt-get install mpich)")
    return lctrain, shutil.which(mpiexec)


@contextlib.contextmanager
def lctrain_of(binary):
    """cli_cases' ok() and run() with another build of lctrain inside the block."""
    saved, cc.LCTRAIN = cc.LCTRAIN, binary
    try:
        yield
    finally:
        cc.LCTRAIN = saved


def link_bytes(c, node):
    """Bytes node `node` has sent over its link so far (its end of the veth pair)."""
    out = subprocess.run(["ip", "netns", "exec", c.ns[node], "cat", "/sys/class/net/eth0/statistics/tx_bytes"],
                         capture_output=True, text=True, check=True).stdout
    return int(out)


@case
def cp_stays_inside_a_node_dp_spans_nodes_and_the_losses_equal_one_rank():
    """2 nodes x 2 ranks, cp 2 x dp 2: each cp pair on one node with its ring hops over shared
    memory, the two replicas on different nodes, the gradient reduced across the link
    hierarchically (inside each node, then across); the losses are one rank's with the same
    global batch (--batch-size is per replica). The flat all-reduce over the 4 ranks sends
    more over the link for the same losses."""
    fixture()
    ok("train", *TRAIN[1:], "--steps", "5", "--batch-size", "2", "--run-dir", "one")
    sent = {}
    with cluster(2) as c:
        for how in ("hierarchical", "flat"):
            before = link_bytes(c, 0)
            rc, out = c.run(lct(*TRAIN, "--steps", "5", "--batch-size", "1", "--cp", "2", "--dp", "2",
                                "--grad-reduce", how, "--run-dir", "two" if how == "flat" else how), 2)
            sent[how] = link_bytes(c, 0) - before
            assert rc == 0, out[-3000:]
            assert ("gradient all-reduce (--grad-reduce hierarchical)" in out) == (how == "hierarchical"), out[-3000:]
            if how == "hierarchical":
                assert_same_losses(timing("one")[0]["loss"], how, "2 nodes x 2 ranks, hierarchical")
    print(out[-3000:])
    print(f"node 0 sent {sent['hierarchical'] / 2**20:.2f} MiB with the hierarchical all-reduce, "
          f"{sent['flat'] / 2**20:.2f} MiB with the flat one (5 steps and start-up)")
    assert sent["hierarchical"] < 0.9 * sent["flat"], sent
    layout = re.findall(r"rank (\d) -> (node\d), dp (\d), cp (\d)", out)
    assert layout == [("0", "node0", "0", "0"), ("1", "node0", "0", "1"), ("2", "node1", "1", "0"),
                      ("3", "node1", "1", "1")], layout
    assert "2 hops, all shm" in out, out
    assert_same_losses(timing("one")[0]["loss"], "two", "2 nodes x 2 ranks")


@case
def four_nodes_through_one_switch_train_the_losses_of_one_rank():
    """4 nodes x 1 rank behind one bridge, cp 2 x dp 2: each cp pair spans two nodes (its ring
    hops over the links) and the two replicas reduce across the other pair; losses are one
    rank's. With 2 CPUs, two nodes share each: a functional check, not a timing."""
    fixture()
    ok("train", *TRAIN[1:], "--steps", "4", "--batch-size", "2", "--run-dir", "one")
    with cluster(4) as c:
        rc, out = c.run(lct(*TRAIN, "--steps", "4", "--batch-size", "1", "--cp", "2", "--dp", "2", "--run-dir", "four"), 1)
    assert rc == 0, out[-3000:]
    hosts = re.findall(r"rank (\d) -> (node\d),", out)
    assert hosts == [("0", "node0"), ("1", "node1"), ("2", "node2"), ("3", "node3")], hosts
    assert "2 hops, all mpi" in out, out[-3000:]
    assert_same_losses(timing("one")[0]["loss"], "four", "4 nodes x 1 rank")


@case
def nodes_with_unequal_ranks_are_told_with_the_layout_chosen():
    """2 ranks on node 0 and 1 on node 1 (a launcher's uneven fill): the run goes on with the
    layout printed and one note naming the counts and how to even them."""
    fixture()
    with cluster(2) as c:
        rc, out = c.run(lct(*TRAIN, "--steps", "2", "--batch-size", "1", "--dp", "3", "--run-dir", "uneven"), [2, 1])
    assert rc == 0, out[-3000:]
    assert re.findall(r"rank (\d) -> (node\d),", out) == [("0", "node0"), ("1", "node0"), ("2", "node1")], out[-3000:]
    notes = [l for l in out.splitlines() if l.startswith("note: the hosts run unequal numbers of ranks")]
    assert len(notes) == 1 and "(node0 2, node1 1)" in notes[0] and "--ntasks-per-node" in notes[0], out[-3000:]
    print(notes[0])


@case
def a_checkpoint_written_across_nodes_resumes_on_another_number_of_nodes():
    """cp 2 across 2 nodes (each hop over the link) checkpoints at step 4; the run resumed on
    one node (2 ranks, shared memory) and the one resumed on 2 nodes x 1 rank with dp 2 both
    continue the straight one-node run's losses."""
    fixture()
    ok("train", *TRAIN[1:], "--steps", "6", "--batch-size", "2", "--run-dir", "straight")
    with cluster(2) as c:
        t0 = time.time()
        rc, out = c.run(lct(*TRAIN, "--steps", "6", "--stop-at", "4", "--batch-size", "2", "--cp", "2",
                            "--checkpoint-every", "2", "--run-dir", "nodes"), 1)
        print(out[-1500:])
        assert rc in (85, 1) and "exit code 85" in out, (rc, out[-2000:])  # mpirun returns 1 for 85
        ck = re.findall(r"checkpoint \S+: ([\d.]+) MiB in ([\d.]+) s", out)
        print(f"checkpoints across 2 nodes: {ck} ({time.time() - t0:.1f} s in all)")
        assert ck, out
        # Resumed on the same 2 nodes as dp 2 (another layout over the link).
        rc, out2 = c.run(lct(*TRAIN, "--steps", "6", "--batch-size", "1", "--dp", "2", "--run-dir", "nodes",
                             "--resume", "auto"), 1)
        assert rc == 0, out2[-2000:]
    shutil.copytree("nodes", "nodes_copy")
    straight = timing("straight")[0]["loss"]
    resumed = timing("nodes")[0]
    got = resumed["loss"][resumed["step"] == 6][-1]
    print(f"step 6: straight {straight[5]}, resumed across nodes {got}")
    assert abs(got - straight[5]) <= 1e-5 * straight[5], (got, straight[5])
    # And on one node, from the checkpoint of step 4 written across nodes.
    p = ok(*TRAIN, "--steps", "6", "--batch-size", "2", "--cp", "2", "--run-dir", "nodes_copy",
           "--resume", "nodes_copy/checkpoints/step_00000004.h5", ranks=2)
    one = timing("nodes_copy")[0]
    assert abs(one["loss"][one["step"] == 6][-1] - straight[5]) <= 1e-5 * straight[5], p.stdout[-2000:]


@case
def a_node_lost_mid_run_stops_every_rank_and_names_it():
    """kill -9 of every process of node 1 (its launcher daemon and ranks) during training: the
    job ends within the comm timeout, the launcher names the lost node, and the last
    checkpoint is complete (readable, resumable)."""
    fixture()
    with cluster(2) as c:
        with open("out.txt", "w+") as out:
            p = c.start(lct(*TRAIN, "--steps", "100000", "--cp", "2", "--checkpoint-every", "50",
                            "--comm-timeout", "10", "--log-every", "100", "--run-dir", "r"), 1, out)
            c.wait_for("r/checkpoints/latest")
            time.sleep(1)
            t0 = time.time()
            killed = c.kill_node(1)
            p.wait(timeout=60)
            took = time.time() - t0
            out.seek(0)
            text = out.read()
    print(text[-2500:])
    print(f"killed {len(killed)} processes of node1; the job ended {took:.1f} s later with exit {p.returncode}")
    assert p.returncode != 0 and took < 10, (p.returncode, took)
    assert re.search(r"node1|198\.18\.0\.2", text[-4000:]), "the lost node is not named"
    latest = open("r/checkpoints/latest").read().strip()
    with h5py.File(f"r/checkpoints/{os.path.basename(latest)}", "r") as f:
        assert "step" in f.attrs or len(f.keys()) > 0
    step = int(re.search(r"step_(\d+)", latest).group(1))
    p = ok(*TRAIN, "--cp", "2", "--steps", str(step + 1), "--run-dir", "r", "--resume", "auto", ranks=2)
    assert f"at step {step}" in p.stdout, p.stdout[-2000:]


@case
def under_mpich_cp2_and_dp2_across_two_nodes_train_the_losses_of_one_rank():
    """MPICH's hydra mpiexec on node 0 starts a proxy on node 1 through the nodes' agent; 2 nodes
    x 1 rank, cp 2 (every ring hop over the link) and then dp 2 (the gradient reduced across
    it): both runs' losses are one rank's of the same build with the same global batch, and
    UCX's endpoints between the nodes are TCP on eth0, not shared memory (which UCX would
    pick between namespaces of one machine; see Cluster.mpiexec_argv). A launcher left hanging
    in MPI_Finalize after the run finished (MPICH 4.0 over UCX's TCP, Cluster.mpiexec_argv) is
    ended and noted, not failed."""
    lctrain, mpiexec = mpich()
    with lctrain_of(lctrain):
        fixture()
        ok("train", *TRAIN[1:], "--steps", "4", "--batch-size", "2", "--run-dir", "one")
    ref = timing("one")[0]["loss"]
    with cluster(2, mpi="mpich", mpiexec=mpiexec) as c:
        runs = {}
        for name, par in (("cp", ["--cp", "2", "--batch-size", "2"]), ("dp", ["--dp", "2", "--batch-size", "1"])):
            runs[name] = c.run([lctrain, "--oversubscribe", *TRAIN, "--steps", "4", *par, "--run-dir", name], 1,
                               env={"UCX_LOG_LEVEL": "info"}, timeout=240, finished=f"wrote {name}/timing.h5",
                               grace=10)
    for name, (rc, out) in runs.items():
        if rc == Cluster.HUNG:
            print(f"note: {name}: mpiexec had not exited 10 s after the run finished: MPICH 4.0's MPI_Finalize "
                  "hang over UCX's TCP (Cluster.mpiexec_argv); its processes were killed")
        assert rc in (0, Cluster.HUNG), (name, rc, out[-3000:])
        layout = re.findall(r"rank (\d) -> (node\d),", out)
        assert layout == [("0", "node0"), ("1", "node1")], (name, layout, out[-3000:])
        eps = re.findall(r"ep_cfg\[\d+\]: (.*)", out)
        assert eps and any("tcp/eth0" in e for e in eps), (name, "UCX's endpoints are not TCP on eth0", eps)
        shm = [e for e in eps if re.search(r"\b(sysv|posix|cma|knem|xpmem)/", e)]
        assert not shm, (name, "UCX moves messages between the nodes through shared memory", shm)
        print(f"{name} 2 across node0 and node1 under {mpiexec}: UCX endpoints {sorted(set(eps))}")
        assert_same_losses(ref, name, f"MPICH, {name} 2 across 2 nodes")
    assert "2 hops, all mpi" in runs["cp"][1], runs["cp"][1][-3000:]


if __name__ == "__main__":
    for i, arg in enumerate(sys.argv):
        if arg == "--mpich-build" or arg.startswith("--mpich-build="):
            MPICH_BUILD = arg.split("=", 1)[1] if "=" in arg else sys.argv[i + 1]
            del sys.argv[i:i + (1 if "=" in arg else 2)]
            break
    sys.exit(cc.main())
