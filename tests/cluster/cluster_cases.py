#!/usr/bin/python3
"""lctrain across emulated nodes with their own network (tests/cluster/cluster.py): network
and UTS namespaces joined by shaped veth links, each node on its own CPUs. The layout (cp
inside a node, dp across nodes), the ring's hops (shared memory inside, MPI across), losses
equal to one node's, a checkpoint written across nodes and resumed on another number of
nodes, and a node lost in the middle of a run. Needs root; skipped with one line otherwise.
Run by ctest as cluster.CASE; the helpers are tests/cli/cli_cases.py's."""
import contextlib
import os
import re
import shutil
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


@contextlib.contextmanager
def cluster(nodes):
    """The emulated nodes, or the case skipped with the reason this machine cannot host them."""
    if cc.MPI_FAMILY != "openmpi":
        raise cc.Skip("the emulated nodes are launched with Open MPI's mpirun and its rsh agent")
    try:
        c = Cluster(nodes=nodes, rate=RATE).__enter__()
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


@case
def cp_stays_inside_a_node_dp_spans_nodes_and_the_losses_equal_one_rank():
    """2 nodes x 2 ranks, cp 2 x dp 2: each cp pair on one node with its ring hops over shared
    memory, the two replicas on different nodes, the gradient reduced across the link; the
    losses are one rank's with the same global batch (--batch-size is per replica)."""
    fixture()
    ok("train", *TRAIN[1:], "--steps", "5", "--batch-size", "2", "--run-dir", "one")
    with cluster(2) as c:
        rc, out = c.run(lct(*TRAIN, "--steps", "5", "--batch-size", "1", "--cp", "2", "--dp", "2", "--run-dir", "two"), 2)
    print(out[-3000:])
    assert rc == 0, out[-3000:]
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


if __name__ == "__main__":
    sys.exit(cc.main())
