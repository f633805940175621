#!/usr/bin/python3
"""Parallel training through the command line: every dp / cp / tp / zero layout and cp algorithm
trains the single rank's losses (tiny model, 600-token sequences, ranks oversubscribed:
functional, not fast). Run by ctest as parallel.CASE; the helpers are cli_cases.py's."""
import os
import re
import signal
import subprocess
import sys
import time

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, expect_error, good_model, ok, timing  # noqa: E402


def mpi_run(ranks, run_dir, *extra, steps=5, model="m.h5", data="d16.h5"):
    """tiny training run on `ranks` ranks (oversubscribed: functional, not fast)."""
    return ok("--oversubscribe", "train", "--model", model, "--data", data, "--run-dir", run_dir,
              "--seq-len", "600", "--steps", str(steps), "--lr", "3e-3", "--warmup-steps", "2",
              "--block-q", "32", "--block-k", "32", "--peak-gflops", "100", *extra, ranks=ranks)


def parallel_fixture(model="m.h5", one="one", *extra):
    """m.h5 and d16.h5 (once), and the single-rank run `one` of `model`: its losses."""
    if not os.path.exists("m.h5"):
        good_model()
        ok("prepare", "--synthetic", "passkey", "--num-docs", "16", "--doc-length", "300", "-o", "d16.h5")
    ok("train", "--model", model, "--data", "d16.h5", "--run-dir", one, "--seq-len", "600", "--steps", "5",
       "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32", "--block-k", "32", "--batch-size", "2", *extra)
    return timing(one)[0]["loss"]


def assert_checkpoint_evaluates_as(ref_dir, run_dir, what):
    """eval reads the 5th checkpoint of `run_dir` as a model file: the loss of `ref_dir`'s to 1e-5."""
    def loss(model, out):
        ok("eval", "--model", model, "--data", "d16.h5", "--seq-len", "600", "--out", out)
        with h5py.File(out, "r") as f:
            return float(f.attrs["mean_loss"])
    name = "checkpoints/step_00000005.h5"
    a, b = loss(f"{ref_dir}/{name}", f"e_{ref_dir}.h5"), loss(f"{run_dir}/{name}", f"e_{run_dir}.h5")
    print(f"eval of the 5th checkpoint: one rank {a}, {what} {b}")
    assert abs(a - b) <= 1e-5 * a, (a, b)


def assert_same_losses(ref, run_dir, what, bound=1e-5):
    got = timing(run_dir)[0]["loss"]
    rel = np.max(np.abs(got - ref) / ref)
    print(f"{what}: losses {got}, max rel diff to one rank {rel:.2e}")
    assert rel < bound, (what, got, ref)



# --- where ranks run on a host --------------------------------------------------------------

UNBOUND = {"OMPI_MCA_hwloc_base_binding_policy": "none"}  # Open MPI as MPICH's hydra: bind nothing


def lctrain_processes():
    """{pid: CPUs allowed to its threads, together} of the lctrain ranks started in this folder."""
    found = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.readlink(f"/proc/{pid}/exe") != cc.LCTRAIN or os.readlink(f"/proc/{pid}/cwd") != os.getcwd():
                continue
            cpus = set()
            for task in os.listdir(f"/proc/{pid}/task"):
                line = [l for l in open(f"/proc/{pid}/task/{task}/status") if l.startswith("Cpus_allowed_list")]
                cpus |= set(parse_cpu_list(line[0].split(":")[1].strip()))
            found[int(pid)] = cpus
        except OSError:
            continue
    return found


def parse_cpu_list(text):
    out = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        out += range(int(a), int(b or a) + 1)
    return out


@case
def ranks_that_a_launcher_leaves_unbound_divide_the_host_between_them():
    """MPICH's hydra binds nothing, and neither does mpirun --bind-to none: every rank is given
    the whole host. The ranks divide it: their threads run on disjoint CPUs (each used to pin
    its thread to the host's first CPU, and two ranks then shared one core)."""
    if len(os.sched_getaffinity(0)) < 2:
        raise cc.Skip("needs 2 CPUs")
    parallel_fixture()
    cmd, env = cc.command("train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "r", "--seq-len", "600",
                          "--steps", "100000", "--cp", "2", "--block-q", "32", "--block-k", "32",
                          "--peak-gflops", "100", "--log-every", "1000", ranks=2, env=UNBOUND)
    with open("out.txt", "w+") as out:
        p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, text=True)
        t0 = time.time()
        while not os.path.exists("r/timing.h5") and p.poll() is None and time.time() - t0 < 60:
            time.sleep(0.2)
        ranks = lctrain_processes()
        for pid in ranks:
            os.kill(pid, signal.SIGUSR1)  # checkpoint and stop, whatever the launcher forwards
        p.wait(timeout=60)
        out.seek(0)
        text = out.read()
    print(text[-1500:])
    print("CPUs of each rank:", ranks)
    assert len(ranks) == 2, ranks
    a, b = ranks.values()
    assert a and b and not (a & b), f"ranks share CPUs: {ranks}"
    assert re.search(r"rank cpuset \d+, its share of CPUs [0-9,-]+, which the launcher gave 2 ranks, \(NUMA", text), text


@case
def omp_places_over_cpus_the_ranks_must_divide_is_refused():
    """Ranks given the same CPUs divide them; OMP_PLACES would bind each rank's threads over all
    of them, on top of the other rank's: every rank stops with one line and the fix."""
    if len(os.sched_getaffinity(0)) < 2:
        raise cc.Skip("needs 2 CPUs")
    expect_error(["init", "-o", "x.h5"], "2 ranks on host", "were given the same CPUs",
                 "OMP_PLACES/OMP_PROC_BIND bind threads over all of them", "unset OMP_PLACES and OMP_PROC_BIND",
                 ranks=2, env={**UNBOUND, "OMP_PLACES": "cores"})


@case
def ranks_given_overlapping_cpu_sets_are_refused_with_the_ranks_named():
    """A launcher (or a user's taskset) that gives two ranks CPU sets that overlap without being
    equal: no division is right, so every rank stops with one line naming both ranks."""
    if len(os.sched_getaffinity(0)) < 2:
        raise cc.Skip("needs 2 CPUs")
    good_model()
    args = ["init", "-o", "x.h5"]
    cmd, env = cc.command(*args, ranks=1, env=UNBOUND)
    launcher, lct = cmd[:cmd.index(cc.LCTRAIN)], cmd[cmd.index(cc.LCTRAIN):]
    mpmd = [*launcher, "taskset", "-c", "0-1", *lct, ":", "-n", "1", "taskset", "-c", "1", *lct]
    p = subprocess.run(mpmd, capture_output=True, text=True, env=env, timeout=120)
    errors = [l for l in p.stderr.splitlines() if l.startswith("lctrain: ")]
    assert p.returncode == 1, (p.returncode, p.stdout, p.stderr)
    assert len(errors) == 1, p.stderr
    assert "ranks 0 and 1 on host" in errors[0] and "overlapping CPU sets (0-1 and 1)" in errors[0], errors[0]
    assert "bind each rank to cores of its own" in errors[0], errors[0]
    assert not os.path.exists("x.h5")

@case
def parallel_bf16_cp2_and_dp2_match_one_rank_bf16():
    """bf16 K/V on the ring and bf16 gradients on the wire: within bf16's precision of one rank."""
    ref = parallel_fixture("m.h5", "one16", "--precision", "bf16")
    for name, ranks, degrees in [("cp2", 2, ["--cp", "2"]), ("dp2", 2, ["--dp", "2", "--batch-size", "1"])]:
        mpi_run(ranks, name, *degrees, "--precision", "bf16", *([] if "--batch-size" in degrees else ["--batch-size", "2"]))
        assert_same_losses(ref, name, f"bf16 {name}", bound=1e-2)


@case
def parallel_cp2_and_cp4_match_one_rank():
    ref = parallel_fixture()
    p = mpi_run(2, "cp2", "--cp", "2", "--batch-size", "2")
    assert "rank layout (dp=1 x cp=2 x tp=1)" in p.stdout and "comm" in p.stdout and "imb" in p.stdout, p.stdout
    assert p.stdout.count("verification:") == 1, "rank 0 alone prints"
    assert_same_losses(ref, "cp2", "cp=2 ring")
    mpi_run(4, "cp4", "--cp", "4", "--batch-size", "2")
    assert_same_losses(ref, "cp4", "cp=4 ring")
    steps, attrs = timing("cp4")
    assert steps["rank_seconds"].shape == (5, 4) and np.all(steps["rank_bytes_sent"] > 0)
    assert attrs["cp"] == 4 and 0 <= attrs["median_exposed_comm_frac"] < 1


@case
def parallel_ring_over_shared_memory_and_over_mpi_train_the_same_losses():
    ref = parallel_fixture()
    p = mpi_run(4, "shm", "--cp", "4", "--batch-size", "2", "--cp-transport", "shm")
    assert "ring transport (--cp-transport shm), rank 0: shm to rank 1, shm from rank 3; 4 hops, all shm" in p.stdout
    m = re.search(r"ring traffic of rank 0 in this run: ([\d.]+) MiB through shared memory, 0\.00 MiB through MPI",
                  p.stdout)
    assert m and float(m.group(1)) > 0, p.stdout
    p = mpi_run(4, "mpi", "--cp", "4", "--batch-size", "2", "--cp-transport", "mpi")
    assert "rank 0: mpi to rank 1, mpi from rank 3; 4 hops, all mpi" in p.stdout
    assert_same_losses(ref, "shm", "cp=4 ring over shm")
    a, b = timing("shm")[0], timing("mpi")[0]
    assert np.array_equal(a["loss"], b["loss"]) and np.array_equal(a["grad_norm"], b["grad_norm"])
    assert np.array_equal(a["rank_bytes_sent"], b["rank_bytes_sent"])


@case
def parallel_ulysses_matches_one_rank_replicating_kv_heads_and_refuses_what_it_cannot_split():
    """tiny has 4 query and 2 KV heads: cp = 2 splits both, cp = 4 replicates each KV head on
    2 ranks (said at start-up), cp = 3 cannot split the query heads."""
    ref = parallel_fixture()
    mpi_run(2, "u2", "--cp", "2", "--batch-size", "2", "--cp-algo", "ulysses")
    assert_same_losses(ref, "u2", "cp=2 ulysses")
    steps = timing("u2")[0]
    assert np.all(steps["rank_bytes_sent"] > 0)
    p = mpi_run(4, "u4", "--cp", "4", "--batch-size", "2", "--cp-algo", "ulysses")
    assert "Ulysses: 2 key/value heads over 4 ranks: each is replicated on 2 ranks" in p.stdout, p.stdout
    assert_same_losses(ref, "u4", "cp=4 ulysses, KV heads replicated")
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "u3",
                  "--seq-len", "600", "--steps", "2", "--cp", "3", "--cp-algo", "ulysses"],
                 "4 query heads and 2 key/value heads: the query heads must be divisible by cp", ranks=3)


@case
def parallel_dp2_cp2_and_allgather_match_one_rank():
    ref = parallel_fixture()
    mpi_run(4, "dp2cp2", "--cp", "2", "--dp", "2", "--batch-size", "1")
    assert_same_losses(ref, "dp2cp2", "dp=2 x cp=2 ring")
    mpi_run(2, "ag", "--cp", "2", "--batch-size", "2", "--cp-algo", "allgather")
    assert_same_losses(ref, "ag", "cp=2 allgather")
    mpi_run(2, "dp2", "--dp", "2", "--batch-size", "1")
    assert_same_losses(ref, "dp2", "dp=2")


@case
def parallel_balance_cost_trains_the_same_losses_on_uneven_documents_and_resumes_bit_exactly():
    """Documents of 240, 300 and 600 tokens in turn pack into 600-token sequences of one 600 or
    of 240 + 300, whose attention work differs 2.4-fold. --balance cost (the default)
    deals the 600 over the dp ranks (a ring over them): the losses are --balance none's and
    one rank's to rounding, the documents predict an even step where --balance none's are
    uneven, and a run stopped at step 3 and resumed trains steps 4-6 bit for bit as the
    straight run. On dp = 2 x cp = 2 the ring spans the 4 ranks."""
    parallel_fixture()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "24", "--doc-lengths", "240,300,600", "-o", "uneven.h5")
    ok("train", "--model", "m.h5", "--data", "uneven.h5", "--run-dir", "one_u", "--seq-len", "600", "--steps", "6",
       "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32", "--block-k", "32", "--batch-size", "2")
    ref = timing("one_u")[0]["loss"]
    dp2 = ["--dp", "2", "--batch-size", "1", "--checkpoint-every", "3"]
    mpi_run(2, "none", *dp2, "--balance", "none", steps=6, data="uneven.h5")
    p = mpi_run(2, "cost", *dp2, steps=6, data="uneven.h5")
    assert "work balance (--balance cost): each micro-batch's tokens placed by attention work over the 2" in p.stdout
    assert re.search(r"imb [\d.]+ \(docs 1\.00, unbalanced 1\.[1-9]", p.stdout), p.stdout
    assert_same_losses(ref, "none", "dp=2 --balance none")
    assert_same_losses(ref, "cost", "dp=2 --balance cost")
    (none, none_attrs), (cost, cost_attrs) = timing("none"), timing("cost")
    print(f"predicted imbalance: none {none['predicted_imbalance']}, cost {cost['predicted_imbalance']}")
    assert np.all(np.isnan(none["unbalanced_imbalance"])), none["unbalanced_imbalance"]
    assert np.max(none["predicted_imbalance"]) > 1.05, none["predicted_imbalance"]
    assert np.all(cost["predicted_imbalance"] < 1.01), cost["predicted_imbalance"]
    # the same tokens: what cost's steps would have been unbalanced is what none's were
    assert np.allclose(cost["unbalanced_imbalance"], none["predicted_imbalance"], rtol=1e-9)
    assert cost_attrs["median_unbalanced_imbalance"] == none_attrs["median_predicted_imbalance"], (cost_attrs, none_attrs)
    assert np.isnan(none_attrs["median_unbalanced_imbalance"]), none_attrs
    # stopped at step 3, resumed: steps 4-6 and the last checkpoint bit for bit
    first = cc.run("--oversubscribe", "train", "--model", "m.h5", "--data", "uneven.h5", "--run-dir", "split",
                   "--seq-len", "600", "--steps", "6", "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32",
                   "--block-k", "32", "--peak-gflops", "100", *dp2, "--stop-at", "3", ranks=2)
    assert first.returncode == 85, (first.returncode, first.stdout, first.stderr)
    mpi_run(2, "split", *dp2, "--resume", "auto", steps=6, data="uneven.h5")
    resumed = timing("split")[0]
    assert np.array_equal(resumed["loss"][-3:], cost["loss"][3:]), (resumed["loss"], cost["loss"])
    with h5py.File("cost/checkpoints/step_00000006.h5", "r") as a, h5py.File("split/checkpoints/step_00000006.h5", "r") as b:
        names = []
        a.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
        assert len(names) > 20 and "lm_head.weight" in names
        differ = [n for n in names if not np.array_equal(a[n][:], b[n][:])]
        assert not differ, f"not bitwise identical: {differ}"
    mpi_run(4, "cost4", "--dp", "2", "--cp", "2", "--batch-size", "1", steps=6, data="uneven.h5")
    assert_same_losses(ref, "cost4", "dp=2 x cp=2 --balance cost")
    assert np.all(timing("cost4")[0]["predicted_imbalance"] < 1.01)


@case
def parallel_loss_mask_dp2_cp2_matches_one_rank():
    """A loss mask (prepare --loss-on answers): the weighted terms and their normalisation by
    the summed weights of every rank's targets train the single rank's losses on dp=2 x cp=2."""
    parallel_fixture()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "16", "--doc-length", "300", "--loss-on", "answers",
       "-o", "d16m.h5")
    ok("train", "--model", "m.h5", "--data", "d16m.h5", "--run-dir", "onem", "--seq-len", "600", "--steps", "5",
       "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32", "--block-k", "32", "--batch-size", "2")
    ref = timing("onem")[0]["loss"]
    assert not np.allclose(ref, timing("one")[0]["loss"], rtol=1e-2), "the mask changes the loss"
    mpi_run(4, "m4", "--cp", "2", "--dp", "2", "--batch-size", "1", data="d16m.h5")
    assert_same_losses(ref, "m4", "loss mask, dp=2 x cp=2")


@case
def parallel_sliding_window_matches_one_rank_in_every_cp_mode():
    """A model with sliding_window 100 on 600-token sequences: every cp algorithm (hybrid
    too) and ring transport gives the single rank's losses; auto picks the contiguous split (the window
    fits in a rank's share), and on cp = 4 the ring sends K/V one hop instead of three."""
    parallel_fixture()
    ok("init", "-o", "w.h5", "--preset", "tiny", "--sliding-window", "100")
    with h5py.File("w.h5", "r") as f:
        assert f.attrs["sliding_window"] == 100
    ref = parallel_fixture("w.h5", "one_w")
    full = timing("one")[0]["loss"]
    assert np.max(np.abs(ref - full) / full) > 1e-3, (ref, full)  # the window does change the model
    for name, extra in [("ring", ["--cp-transport", "shm"]), ("ring_mpi", ["--cp-transport", "mpi"]),
                        ("allgather", ["--cp-algo", "allgather"]), ("ulysses", ["--cp-algo", "ulysses"])]:
        p = mpi_run(2, f"w_{name}", "--cp", "2", "--batch-size", "2", *extra, model="w.h5")
        assert "(contiguous, " in p.stdout, p.stdout
        assert_same_losses(ref, f"w_{name}", f"cp=2 {name} W=100")
    mpi_run(4, "w_cp4", "--cp", "4", "--batch-size", "2", model="w.h5")
    assert_same_losses(ref, "w_cp4", "cp=4 ring W=100")
    mpi_run(4, "w_hybrid", "--cp", "4", "--batch-size", "2", "--cp-algo", "hybrid", "--ulysses-degree", "2",
            model="w.h5")
    assert_same_losses(ref, "w_hybrid", "cp=4 hybrid 2x2 W=100")
    # Traffic on one document per sequence (packed 300-token documents would end the causal
    # ring early too): the window's ring takes 2 of 4 steps.
    ok("prepare", "--synthetic", "passkey", "--num-docs", "4", "--doc-length", "1300", "-o", "long.h5")
    traffic = {}
    for name, model in [("windowed", "w.h5"), ("causal", "m.h5")]:
        p = ok("--oversubscribe", "train", "--model", model, "--data", "long.h5", "--run-dir", name,
               "--seq-len", "600", "--steps", "1", "--cp", "4", "--cp-split", "contiguous",
               "--block-q", "32", "--block-k", "32", "--peak-gflops", "100", ranks=4)
        m = re.search(r"ring traffic of rank 0 in this run: ([\d.]+) MiB through shared memory, "
                      r"([\d.]+) MiB through MPI; the last micro-batch took (\d) of 4 ring steps", p.stdout)
        assert m, p.stdout
        traffic[name] = (float(m.group(1)) + float(m.group(2)), int(m.group(3)))
    print(f"cp=4 ring traffic of rank 0 (MiB, steps per layer): {traffic}")
    assert traffic["windowed"][1] == 2 and traffic["causal"][1] == 4, traffic
    assert traffic["windowed"][0] < 0.5 * traffic["causal"][0], traffic


@case
def parallel_zero1_shards_the_moments_and_gives_the_replicated_bits():
    """--zero 1: each rank keeps and updates 1/world of the AdamW moments, then the ranks
    all-gather the parameters: the same arithmetic, so the same losses, gradient norms and
    final checkpoint bit for bit as the replicated optimizer, with dp = 2, cp = 2 and
    dp = 2 x cp = 2; the memory estimate counts the shard."""
    parallel_fixture()
    for name, ranks, degrees in [("dp2", 2, ["--dp", "2", "--batch-size", "1"]),
                                 ("cp2", 2, ["--cp", "2", "--batch-size", "2"]),
                                 ("dp2cp2", 4, ["--dp", "2", "--cp", "2", "--batch-size", "1"])]:
        mpi_run(ranks, f"{name}_z0", *degrees)
        p = mpi_run(ranks, f"{name}_z1", *degrees, "--zero", "1")
        assert f"(1/{ranks} of it: --zero 1)" in p.stdout, p.stdout
        a, b = timing(f"{name}_z0")[0], timing(f"{name}_z1")[0]
        assert list(a["loss"]) == list(b["loss"]) and list(a["grad_norm"]) == list(b["grad_norm"]), (name, a, b)
        with h5py.File(f"{name}_z0/checkpoints/step_00000005.h5", "r") as f, \
                h5py.File(f"{name}_z1/checkpoints/step_00000005.h5", "r") as g:
            names = []
            f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) and
                         ("weight" in n) else None)
            assert len(names) > 20 and any(n.startswith("optimizer/exp_avg_sq/") for n in names), names
            differ = [n for n in names if not np.array_equal(f[n][()], g[n][()])]
            assert not differ, (name, differ)
        print(f"{name}: --zero 1 equals --zero 0 bitwise (5 losses, gradient norms, {len(names)} tensors)")


def moments(path):
    """{name: array} of a checkpoint's AdamW moments (whole tensors, however they were sharded)."""
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) and
                     n.startswith("optimizer/exp_avg") else None)
    return out


def assert_same_moments(ref_dir, run_dir, what, step=1):
    """The AdamW moments after `step` equal the one-rank run's: rtol 1e-5, with an absolute
    floor of 1e-5 of each tensor's largest entry (an entry that is a sum of cancelling terms
    keeps only the summation order's rounding, not 1e-5 of itself)."""
    name = f"checkpoints/step_{step:08d}.h5"
    a, b = moments(f"{ref_dir}/{name}"), moments(f"{run_dir}/{name}")
    assert a.keys() == b.keys() and len(a) > 30, (what, sorted(a)[:4], sorted(b)[:4])
    worst = 0.0
    for n in a:
        floor = 1e-5 * float(np.max(np.abs(a[n])))
        np.testing.assert_allclose(b[n], a[n], rtol=1e-5, atol=floor, err_msg=f"{what}: {n}")
        worst = max(worst, float(np.max(np.abs(b[n] - a[n]))) / max(floor * 1e5, 1e-30))
    print(f"{what}: {len(a)} moment tensors after step {step} match one rank "
          f"(largest difference {worst:.1e} of the tensor's largest entry)")


@case
def parallel_zero2_and_zero3_match_one_rank_losses_and_moments():
    """--zero 2 (gradients reduce-scattered) and --zero 3 (parameters sharded too, gathered
    layer by layer) over dp = 2, cp = 2 (2 ranks) and dp = 2 x cp = 2 (4 ranks): 5 losses
    within 1e-5 of one rank, the AdamW moments after the first step and after the fifth
    (gathered whole into the checkpoints) equal to one rank's, and the memory table names
    the stage. Also --grad-accum 2 with --checkpointing full (every micro-batch gathers and
    reduce-scatters each layer; backward gathers once for the recomputation and the
    gradients), and tied embeddings (the LM head is the embedding's unit)."""
    ref = parallel_fixture("m.h5", "onec", "--checkpoint-every", "1", "--keep-checkpoints", "5")
    keep = ["--checkpoint-every", "1", "--keep-checkpoints", "5"]
    for name, ranks, degrees in [("dp2_z2", 2, ["--dp", "2", "--batch-size", "1", "--zero", "2"]),
                                 ("dp2_z3", 2, ["--dp", "2", "--batch-size", "1", "--zero", "3"]),
                                 ("cp2_z3", 2, ["--cp", "2", "--batch-size", "2", "--zero", "3"]),
                                 ("dp2cp2_z3", 4, ["--dp", "2", "--cp", "2", "--batch-size", "1", "--zero", "3"])]:
        p = mpi_run(ranks, name, *degrees, *keep)
        stage = degrees[-1]
        assert f"(1/{ranks} of it: --zero {stage})" in p.stdout, p.stdout
        if stage == "3":
            assert f"(1/{ranks} of them + gathered units: --zero 3)" in p.stdout, p.stdout
        assert_same_losses(ref, name, f"--zero {stage} {name}")
        for step in (1, 5):
            assert_same_moments("onec", name, f"--zero {stage} {name}", step)
    # Several micro-batches and the whole layer recomputed.
    extra = ["--grad-accum", "2", "--checkpointing", "full"]
    ok("train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "onega", "--seq-len", "600", "--steps", "5",
       "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32", "--block-k", "32", "--batch-size", "2",
       *extra, *keep)
    mpi_run(2, "ga_z3", "--dp", "2", "--batch-size", "1", "--zero", "3", *extra, *keep)
    assert_same_losses(timing("onega")[0]["loss"], "ga_z3", "--zero 3 --grad-accum 2 --checkpointing full")
    assert_same_moments("onega", "ga_z3", "--zero 3 --grad-accum 2", 1)
    # Tied embeddings.
    ok("init", "-o", "mt.h5", "--preset", "tiny", "--tie-word-embeddings", "true")
    tied = parallel_fixture("mt.h5", "onet", *keep)
    mpi_run(2, "tied_z3", "--dp", "2", "--batch-size", "1", "--zero", "3", *keep, model="mt.h5")
    assert_same_losses(tied, "tied_z3", "--zero 3 tied embeddings")
    assert_same_moments("onet", "tied_z3", "--zero 3 tied embeddings", 1)


@case
def parallel_zero3_checkpoint_is_a_model_file_and_bad_zero_is_refused():
    """A --zero 3 checkpoint holds whole tensors: eval reads it as a model file (the same
    loss as the one-rank run's checkpoint to 1e-5) and inspect shows it. --zero 4, and
    --zero 3 with bf16 (fp32 only), are refused with one message on every rank, before
    anything is written."""
    parallel_fixture()
    mpi_run(2, "z3", "--dp", "2", "--batch-size", "1", "--zero", "3")
    assert_checkpoint_evaluates_as("one", "z3", "--zero 3")
    p = ok("inspect", "z3/checkpoints/step_00000005.h5")
    assert "train_state" in p.stdout, p.stdout
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "bad",
                  "--seq-len", "600", "--dp", "2", "--zero", "4"], "--zero", "4", code=2, ranks=2)
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "bad",
                  "--seq-len", "600", "--dp", "2", "--zero", "3", "--precision", "bf16"],
                 "--zero 3 trains in fp32 only", "--precision fp32", ranks=2)
    assert not os.path.exists("bad"), "a refused run wrote its run directory"


def tp_models():
    """mv.h5: tiny with 260 vocabulary rows (4 heads, 2 KV heads, I 176: --tp 2 splits it);
    mk4.h5: the same with 4 KV heads (--tp 4 splits it); one-rank references of each."""
    parallel_fixture()
    keep = ["--checkpoint-every", "1", "--keep-checkpoints", "5"]
    if not os.path.exists("mv.h5"):
        ok("init", "-o", "mv.h5", "--preset", "tiny", "--vocab-size", "260")
        ok("init", "-o", "mk4.h5", "--preset", "tiny", "--vocab-size", "260", "--num-key-value-heads", "4")
        parallel_fixture("mv.h5", "onev", *keep)
        parallel_fixture("mk4.h5", "onek4", *keep)
    return keep


@case
def parallel_tp_matches_one_rank_losses_and_moments():
    """--tp (Megatron: heads, KV heads, SwiGLU rows and vocabulary rows split over the tp
    ranks, which see the same tokens) alone and with cp, dp and --zero 1/2/3: 5 losses within
    1e-5 of one rank, and the AdamW moments after the first and the fifth step (gathered
    whole from the tp slices into the checkpoints) equal to one rank's. The dp 2 x tp 2
    --zero 3 checkpoint (each rank wrote its ZeRO-3 pieces of its tp slices) is a model file:
    eval gives the one-rank checkpoint's loss of the same step to 1e-5, inspect shows it."""
    keep = tp_models()
    ref, ref4 = timing("onev")[0]["loss"], timing("onek4")[0]["loss"]
    for name, ranks, degrees, model, one in [
            ("tp2", 2, ["--tp", "2", "--batch-size", "2"], "mv.h5", "onev"),
            ("tp4", 4, ["--tp", "4", "--batch-size", "2"], "mk4.h5", "onek4"),
            ("tp2cp2", 4, ["--tp", "2", "--cp", "2", "--batch-size", "2"], "mv.h5", "onev"),
            ("tp2dp2", 4, ["--tp", "2", "--dp", "2", "--batch-size", "1"], "mv.h5", "onev"),
            ("tp2dp2_z1", 4, ["--tp", "2", "--dp", "2", "--batch-size", "1", "--zero", "1"], "mv.h5", "onev"),
            ("tp2dp2_z2", 4, ["--tp", "2", "--dp", "2", "--batch-size", "1", "--zero", "2"], "mv.h5", "onev"),
            ("tp2dp2_z3", 4, ["--tp", "2", "--dp", "2", "--batch-size", "1", "--zero", "3"], "mv.h5", "onev")]:
        p = mpi_run(ranks, name, *degrees, *keep, model=model)
        tp = int(degrees[1])
        assert f"x tp={tp})" in p.stdout and f"; --tp {tp}: each rank holds" in p.stdout, p.stdout
        assert_same_losses(ref4 if model == "mk4.h5" else ref, name, f"--tp {name}")
        for step in (1, 5):
            assert_same_moments(one, name, f"--tp {name}", step)
        steps = timing(name)[0]
        assert np.all(steps["rank_bytes_sent"] > 0), steps["rank_bytes_sent"]
    # The weights, not only the moments: a slice or ZeRO piece written to the wrong place
    # changes the loss far beyond 1e-5.
    assert_checkpoint_evaluates_as("onev", "tp2dp2_z3", "--tp 2 x dp 2 --zero 3")
    p = ok("inspect", "tp2dp2_z3/checkpoints/step_00000005.h5")
    assert "all tensors present, shapes and checksums verified" in p.stdout, p.stdout
    assert re.search(r"^\s+step\s+5$", p.stdout, re.M) and re.search(r"^\s+world_size\s+4$", p.stdout, re.M), p.stdout


@case
def parallel_tp_with_bf16_ulysses_recomputation_and_tied_embeddings_matches_one_rank():
    """--tp 2 with bf16 products (within bf16's rounding of one bf16 rank), with Ulysses cp 2
    (the all-to-all carries each tp rank's heads: 1 KV head over 2 ranks, replicated), with
    --grad-accum 2 and --checkpointing full (every layer recomputed, its all-reduces again),
    and with tied embeddings (the vocabulary-parallel embedding is the LM head): one rank's
    losses."""
    tp_models()
    ref = timing("onev")[0]["loss"]
    mpi_run(4, "tp_u", "--tp", "2", "--cp", "2", "--batch-size", "2", "--cp-algo", "ulysses", model="mv.h5")
    assert_same_losses(ref, "tp_u", "--tp 2 x cp 2 ulysses")
    mpi_run(2, "tp_ga", "--tp", "2", "--batch-size", "1", "--grad-accum", "2", "--checkpointing", "full",
            model="mv.h5")
    assert_same_losses(ref, "tp_ga", "--tp 2 --grad-accum 2 --checkpointing full")
    ref16 = parallel_fixture("mv.h5", "onev16", "--precision", "bf16")
    mpi_run(2, "tp_16", "--tp", "2", "--batch-size", "2", "--precision", "bf16", model="mv.h5")
    assert_same_losses(ref16, "tp_16", "--tp 2 bf16", bound=1e-3)
    ok("init", "-o", "mtv.h5", "--preset", "tiny", "--vocab-size", "260", "--tie-word-embeddings", "true")
    tied = parallel_fixture("mtv.h5", "onetv", "--checkpoint-every", "1", "--keep-checkpoints", "5")
    mpi_run(2, "tp_tied", "--tp", "2", "--batch-size", "2", "--checkpoint-every", "1", "--keep-checkpoints", "5",
            model="mtv.h5")
    assert_same_losses(tied, "tp_tied", "--tp 2 tied embeddings")
    assert_same_moments("onetv", "tp_tied", "--tp 2 tied embeddings", 1)
    # ZeRO-3 over dp 2 of the tp slices, tied: the LM head is the embedding's unit
    mpi_run(4, "tp_tied_z3", "--tp", "2", "--dp", "2", "--batch-size", "1", "--zero", "3", "--checkpoint-every", "1",
            "--keep-checkpoints", "5", model="mtv.h5")
    assert_same_losses(tied, "tp_tied_z3", "--tp 2 x dp 2 --zero 3 tied embeddings")
    assert_same_moments("onetv", "tp_tied_z3", "--tp 2 x dp 2 --zero 3 tied embeddings", 1)


@case
def parallel_tp_sequence_parallel_matches_one_rank_losses_and_moments():
    """--tp-sequence-parallel (the residual stream, norms and their activations split by
    tokens over the tp ranks; reduce-scatter + all-gather in place of each all-reduce, the
    norm weights' gradients summed over the group) on tp = 2, tp = 2 x cp = 2 and tp = 2 x
    dp = 2 with --zero 2, and with --checkpointing full: one rank's losses and moments. It is
    refused without --tp, and when a micro-batch's tokens do not split over the tp ranks."""
    keep = tp_models()
    ref = timing("onev")[0]["loss"]
    for name, ranks, degrees in [
            ("sp2", 2, ["--tp", "2", "--batch-size", "2"]),
            ("sp2cp2", 4, ["--tp", "2", "--cp", "2", "--batch-size", "2"]),
            ("sp2dp2_z2", 4, ["--tp", "2", "--dp", "2", "--batch-size", "1", "--zero", "2"]),
            ("sp2_full", 2, ["--tp", "2", "--batch-size", "2", "--checkpointing", "full"])]:
        p = mpi_run(ranks, name, *degrees, "--tp-sequence-parallel", *keep, model="mv.h5")
        assert "1/2 of the residual stream's tokens (--tp-sequence-parallel)" in p.stdout, p.stdout
        assert_same_losses(ref, name, f"--tp-sequence-parallel {name}")
        for step in (1, 5):
            assert_same_moments("onev", name, f"--tp-sequence-parallel {name}", step)
    bad = ["--oversubscribe", "train", "--model", "mv.h5", "--data", "d16.h5", "--run-dir", "bad"]
    expect_error([*bad, "--seq-len", "600", "--tp-sequence-parallel"], "--tp-sequence-parallel", "--tp 1",
                 ranks=2)
    expect_error([*bad, "--seq-len", "601", "--tp", "2", "--batch-size", "1", "--tp-sequence-parallel"],
                 "splits the 601 tokens", "over --tp 2", ranks=2)
    assert not os.path.exists("bad"), "a refused run wrote its run directory"


@case
def parallel_tp_checkpoint_is_a_model_file_and_impossible_tp_is_refused():
    """A --tp 2 checkpoint holds whole tensors in the model file's shapes: eval reads it (the
    one-rank checkpoint's loss to 1e-5) and inspect shows it. Degrees that do not multiply to
    the world, a model whose vocabulary or KV heads --tp does not divide, and --zero 3 with
    --tp-sequence-parallel are refused with one message, before anything is written."""
    tp_models()
    mpi_run(2, "tpc", "--tp", "2", "--batch-size", "2", model="mv.h5")
    assert_checkpoint_evaluates_as("onev", "tpc", "--tp 2")
    with h5py.File("tpc/checkpoints/step_00000005.h5", "r") as f:
        shapes = {}
        f.visititems(lambda n, o: shapes.__setitem__(n, o.shape) if isinstance(o, h5py.Dataset) else None)
    def shape(end):
        found = {s for n, s in shapes.items() if n.endswith(end)}
        assert len(found) == 1, (end, found)
        return found.pop()
    assert shape("layers.0.self_attn.k_proj.weight") == (32, 64), shapes  # KV heads x head size, C
    assert shape("layers.0.mlp.down_proj.weight") == (64, 176), shapes   # C, I
    assert shape("embed_tokens.weight") == (260, 64), shapes
    p = ok("inspect", "tpc/checkpoints/step_00000005.h5")
    assert "train_state" in p.stdout, p.stdout
    bad = ["--oversubscribe", "train", "--data", "d16.h5", "--run-dir", "bad", "--seq-len", "600"]
    expect_error([*bad, "--model", "mv.h5", "--tp", "3"], "dp=1 x cp=1 x tp=3 = 3 ranks", "the job has 2",
                 ranks=2)
    expect_error([*bad, "--model", "mv.h5", "--tp", "2", "--cp", "2"], "dp=1 x cp=2 x tp=2 = 4 ranks",
                 "the job has 2", ranks=2)
    expect_error([*bad, "--model", "m.h5", "--tp", "2"], "--tp 2", "vocab_size 259 is not divisible by 2",
                 "pad the vocabulary: a model made with `lctrain init --vocab-size 260`", ranks=2)
    expect_error([*bad, "--model", "mv.h5", "--tp", "4", "--batch-size", "2"],
                 "key/value heads (num_key_value_heads) 2", "not divisible by 4", ranks=4)
    expect_error([*bad, "--model", "mv.h5", "--tp", "2", "--zero", "3", "--tp-sequence-parallel"],
                 "--zero 3 does not combine with --tp-sequence-parallel", ranks=2)
    expect_error([*bad, "--model", "mv.h5", "--tp", "0"], "--tp", code=2, ranks=2)
    assert not os.path.exists("bad"), "a refused run wrote its run directory"


@case
def eval_over_cp_ranks_equals_one_rank():
    """eval --cp N splits every sequence over N ranks with the ring: the loss, the targets and
    the greedy next tokens (gathered from the ranks) equal one rank's; a window model takes
    the contiguous split; a partial last batch is padded. A world that is not --cp is refused."""
    parallel_fixture()
    ok("train", "--model", "m.h5", "--data", "d16.h5", "--run-dir", "t", "--seq-len", "600", "--steps", "20",
       "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32", "--block-k", "32")
    ok("init", "-o", "w.h5", "--preset", "tiny", "--sliding-window", "100")
    trained = "t/checkpoints/step_00000020.h5"
    def attrs(path):
        with h5py.File(path, "r") as f:
            return {**f.attrs, "position_loss": f["position/loss"][:], "position_start": f["position/start"][:]}
    for model, name in [(trained, "trained"), ("w.h5", "window 100")]:
        ok("eval", "--model", model, "--data", "d16.h5", "--seq-len", "600", "--batch-size", "3", "--out", "e1.h5",
           "--force")
        one = attrs("e1.h5")
        assert one["next_token_correct"] > 0, one
        for cp in (2, 4):
            p = ok("--oversubscribe", "eval", "--model", model, "--data", "d16.h5", "--seq-len", "600",
                   "--batch-size", "3", "--cp", str(cp), "--out", f"e{cp}.h5", "--force", ranks=cp)
            split = "contiguous" if model == "w.h5" else "zigzag"
            assert f"eval over {cp} ranks ({split} split, ring: {cp} hops, all shm)" in p.stdout, p.stdout
            got = attrs(f"e{cp}.h5")
            rel = abs(got["mean_loss"] - one["mean_loss"]) / one["mean_loss"]
            print(f"{name} cp={cp}: loss {got['mean_loss']:.9f} vs {one['mean_loss']:.9f} (rel {rel:.1e}), "
                  f"next token right {got['next_token_correct']} vs {one['next_token_correct']} of {one['valid_targets']}")
            assert rel < 1e-5 and got["valid_targets"] == one["valid_targets"], (got, one)
            assert abs(int(got["next_token_correct"]) - int(one["next_token_correct"])) <= 2, (got, one)
            assert got["passkey_retrieved"] == one["passkey_retrieved"], (got, one)
            assert got["passkey_repeat_asked"] == one["passkey_repeat_asked"] == repeating_keys("d16.h5"), (got, one)
            assert got["passkey_repeat_retrieved"] == one["passkey_repeat_retrieved"] <= one["passkey_retrieved"]
            assert "  keys repeating a digit  " in p.stdout and "the others" in p.stdout, p.stdout
            # loss by position in the document: the same buckets, the same losses
            assert list(got["position_start"]) == list(one["position_start"]) == [0, 64, 128, 256], one
            assert np.max(np.abs(got["position_loss"] - one["position_loss"]) / one["position_loss"]) < 1e-5
    expect_error(["--oversubscribe", "eval", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600"],
                 "eval splits every sequence over --cp 1 ranks but runs on 2", ranks=2)


@case
def eval_takes_the_training_layouts_and_equals_one_rank():
    """eval runs every cp algorithm of train (the same factory and rules) and dp replicas
    that share the sequences: on 2 ranks, --dp 2, --cp 2 with the all-gather, Ulysses and
    hybrid attention each give one rank's loss, targets and retrieval counts; a layout train
    refuses (Ulysses over heads cp does not divide) is refused with train's message, and
    dp x cp must be the world."""
    parallel_fixture()
    ok("eval", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600", "--batch-size", "2", "--out", "e1.h5")
    with h5py.File("e1.h5", "r") as f:
        one = dict(f.attrs)
    layouts = [["--dp", "2"], ["--cp", "2", "--cp-algo", "allgather"], ["--cp", "2", "--cp-algo", "ulysses"],
               ["--cp", "2", "--cp-algo", "hybrid", "--ulysses-degree", "2"], ["--dp", "0", "--cp-algo", "ring"]]
    for i, flags in enumerate(layouts):
        p = ok("--oversubscribe", "eval", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600",
               "--batch-size", "2", "--out", f"l{i}.h5", *flags, ranks=2)
        with h5py.File(f"l{i}.h5", "r") as f:
            got = dict(f.attrs)
        rel = abs(got["mean_loss"] - one["mean_loss"]) / one["mean_loss"]
        print(f"{' '.join(flags)}: loss {got['mean_loss']:.9f} vs {one['mean_loss']:.9f} (rel {rel:.1e}), "
              f"dp {got['dp']} cp {got['cp']}")
        assert rel < 1e-5 and got["valid_targets"] == one["valid_targets"], (flags, got, one)
        assert got["sequences"] == one["sequences"] and got["passkey_asked"] == one["passkey_asked"], (flags, got)
        assert abs(int(got["next_token_correct"]) - int(one["next_token_correct"])) <= 2, (flags, got, one)
        assert got["dp"] * got["cp"] == 2, got
        if "ulysses" in flags:
            assert "eval over 2 ranks (zigzag split, ulysses)" in p.stdout, p.stdout
    # tiny: 4 query heads, 2 KV heads; Ulysses over 3 ranks cannot split them
    expect_error(["--oversubscribe", "eval", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600",
                  "--cp", "3", "--cp-algo", "ulysses"], "--cp-algo ulysses splits the heads over the 3 cp ranks",
                 ranks=3)
    expect_error(["--oversubscribe", "eval", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600",
                  "--dp", "2", "--cp", "2"], "eval runs --dp 2 x --cp 2 = 4 ranks but was started on 2", ranks=2)


def repeating_keys(path):
    """How many of a passkey file's keys repeat a digit ("92225"), counted from its answers."""
    with h5py.File(path, "r") as f:
        tok, off = f["tokens"][:], f["doc_offsets"][:]
        at, n = f["passkey/answer_offset"][:], f["passkey/answer_length"][:]
    keys = [tok[off[d] + at[d]:off[d] + at[d] + n[d]] for d in range(len(at))]
    assert all(((k >= ord("0")) & (k <= ord("9"))).all() for k in keys), keys[:3]
    return sum(len(set(k.tolist())) < len(k) for k in keys)


@case
def eval_passkey_by_depth_and_length_equals_over_cp_ranks():
    """prepare --doc-lengths makes one passkey set of three lengths (the documents take them in
    turn); eval prints accuracy by depth with a column per length and writes the table
    [lengths x depth buckets] to --out: its totals count every document once, correct never
    exceeds total, and eval --cp 2 gives the same counts as one rank. The model is trained a
    few steps on 1-digit keys (loss on the answers) so that some keys are right."""
    good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "30", "--doc-lengths", "256,400,600",
       "--key-digits", "1", "--loss-on", "answers", "-o", "k.h5")
    with h5py.File("k.h5", "r") as f:
        off = f["doc_offsets"][:]
    assert list(np.diff(off)) == [256, 400, 600] * 10, np.diff(off)
    ok("train", "--model", "m.h5", "--data", "k.h5", "--run-dir", "t", "--seq-len", "600", "--steps", "8",
       "--lr", "1e-2", "--warmup-steps", "1", "--block-q", "32", "--block-k", "32", "--batch-size", "2")
    model = "t/checkpoints/step_00000008.h5"
    def table(path):
        with h5py.File(path, "r") as f:
            g = f["passkey"]
            return {k: g[k][:] for k in ("lengths", "depth_edges", "correct", "total", "accuracy",
                                         "answer_tokens", "answer_right")}, dict(f.attrs)
    runs = {}
    for cp in (1, 2):
        p = ok("--oversubscribe", "eval", "--model", model, "--data", "k.h5", "--seq-len", "600", "--batch-size", "3",
               "--cp", str(cp), "--out", f"e{cp}.h5", ranks=cp if cp > 1 else None)
        runs[cp] = table(f"e{cp}.h5")
        lines = p.stdout[p.stdout.index("passkey retrieval"):].splitlines()
        assert lines[0] == "passkey retrieval (exact key, greedy) by depth of the key and document length:", lines
        assert lines[1].split() == ["256", "tokens", "400", "tokens", "600", "tokens", "all", "lengths"], lines
        assert [l.split()[1] for l in lines[2:7]] == ["0-", "20-", "40-", "60-", "80-100%"], lines
        assert lines[7].split()[0] == "all", lines
        assert lines[8].startswith("  answer tokens right, by digit ") and lines[8].endswith("%"), lines
        assert "repeating a digit" not in p.stdout, p.stdout  # 1-digit keys repeat nothing
    t, attrs = runs[1]
    print("\n".join(lines))
    assert list(t["lengths"]) == [256, 400, 600] and t["total"].shape == t["correct"].shape == (3, 5), t
    assert t["accuracy"].shape == (3, 5) and list(t["depth_edges"]) == [0, 0.2, 0.4, 0.6, 0.8, 1.0], t
    assert t["total"].sum() == 30 and list(t["total"].sum(axis=1)) == [10, 10, 10], t["total"]
    assert np.all(t["correct"] <= t["total"]) and t["correct"].sum() > 0, t
    assert t["correct"].sum() == attrs["passkey_retrieved"] and t["total"].sum() == attrs["passkey_asked"]
    seen = t["total"] > 0
    assert np.allclose(t["accuracy"][seen], t["correct"][seen] / t["total"][seen])
    assert np.all(np.isnan(t["accuracy"][~seen]))
    # Partial credit by place in the key: 1-digit keys, so the first (only) place's right
    # answers are exactly the keys retrieved.
    assert list(t["answer_tokens"]) == [30] and t["answer_right"][0] == t["correct"].sum(), t
    t2 = runs[2][0]
    for k in ("lengths", "correct", "total", "answer_tokens", "answer_right"):
        assert np.array_equal(t2[k], t[k]), (k, t2[k], t[k])
    # One length (--doc-length, as before): the same table with one column and no "all lengths".
    ok("prepare", "--synthetic", "passkey", "--num-docs", "4", "--doc-length", "300", "-o", "one.h5")
    p = ok("eval", "--model", model, "--data", "one.h5", "--seq-len", "600", "--out", "one_e.h5")
    lines = p.stdout[p.stdout.index("passkey retrieval"):].splitlines()
    assert lines[0] == "passkey retrieval (exact key, greedy) by depth of the key:" and lines[1].split() == ["300", "tokens"]
    one, _ = table("one_e.h5")
    assert list(one["lengths"]) == [300] and one["total"].shape == (1, 5) and one["total"].sum() == 4, one
    expect_error(["prepare", "--synthetic", "passkey", "--doc-lengths", "300,0", "-o", "bad.h5"],
                 "--doc-lengths '300,0'", "'0' is not a positive integer")
    with open("t.txt", "w") as f:
        f.write("some text")
    expect_error(["prepare", "t.txt", "--doc-lengths", "300,400", "-o", "bad.h5"],
                 "--doc-lengths sets the lengths of --synthetic passkey and copy documents", "drop --doc-lengths")
    expect_error(["prepare", "--synthetic", "recall", "--doc-lengths", "700,800", "-o", "bad.h5"],
                 "--doc-lengths sets the lengths of --synthetic passkey and copy documents",
                 "recall documents take --doc-length")
    # Long-tailed lengths (a power law): most documents short, a few long, all in range.
    for bad in ["powerlaw:128", "powerlaw:300:200", "powerlaw:128:4096:x", "powerlaw:128:4096:1.5:2"]:
        expect_error(["prepare", "--synthetic", "copy", "--doc-lengths", bad, "-o", "bad.h5"],
                     f"--doc-lengths '{bad}': give powerlaw:MIN:MAX or powerlaw:MIN:MAX:ALPHA")
    ok("prepare", "--synthetic", "copy", "--doc-lengths", "powerlaw:128:4096", "--num-docs", "400", "-o", "tail.h5")
    with h5py.File("tail.h5", "r") as f:
        lengths = np.diff(f["doc_offsets"][:])
    print("power-law copy documents: min", lengths.min(), "median", np.median(lengths), "mean", lengths.mean(),
          "max", lengths.max())
    assert len(lengths) == 400 and lengths.min() >= 128 and lengths.max() <= 4096, lengths
    assert np.median(lengths) < 0.7 * lengths.mean(), lengths  # about 370 against 724


if __name__ == "__main__":
    sys.exit(cc.main())
