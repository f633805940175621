#!/usr/bin/python3
"""Memory tiers: the activations kept for the backward pass (--offload-activations) and the AdamW
moments (--offload-optimizer) on a local disk or another NUMA node's memory, against the same
runs in memory; what is refused.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/memory_cases.py --lctrain build/app/lctrain CASE
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, command_of_tiny_run, expect_error, ok, run, timing  # noqa: E402


def fixture():
    """The tiny preset with 6 layers (3 stay in memory, 3 move), 8 documents of 300 tokens."""
    ok("init", "-o", "m.h5", "--preset", "tiny", "--num-hidden-layers", "6")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "8", "--doc-length", "300", "-o", "d.h5")
    os.mkdir("tier")


def train(run_dir, *extra, steps=4, ranks=None, model="m.h5"):
    args = command_of_tiny_run(run_dir, "--batch-size", "2", "--grad-accum", "2", *extra, steps=steps, model=model)
    return ok("--oversubscribe", *args, ranks=ranks) if ranks else ok(*args)


def weights(run_dir, step):
    """Every dataset of the checkpoint: the weights and the AdamW moments."""
    out = {}
    with h5py.File(f"{run_dir}/checkpoints/step_{step:08d}.h5", "r") as f:
        f.visititems(lambda name, obj: out.update({name: obj[()]}) if isinstance(obj, h5py.Dataset) else None)
    assert any("exp_avg" in k or "moment" in k or k.startswith("optimizer") for k in out), list(out)[:20]
    return out


def assert_same_bits(a, b, step=4):
    la, lb = timing(a)[0]["loss"], timing(b)[0]["loss"]
    assert np.array_equal(la, lb), (a, la, b, lb)
    wa, wb = weights(a, step), weights(b, step)
    assert wa.keys() == wb.keys() and all(np.array_equal(wa[k], wb[k]) for k in wa), (a, b)


@case
def offloaded_activations_train_the_same_bits_on_disk_and_numa():
    """Every checkpointing policy, fp32 and bf16, on disk and on NUMA node 0: the losses and the
    checkpoint are bitwise those of the run in memory; the disk's file is gone afterwards, and
    the start-up line says how much went where."""
    fixture()
    for precision in ("fp32", "bf16"):
        for policy in ("none", "attention", "full"):
            base = f"{precision}_{policy}"
            flags = ["--precision", precision, "--checkpointing", policy]
            train(base, *flags)
            for tier in ("tier", "numa:0"):
                p = train(f"{base}_{tier[:4]}", *flags, "--offload-activations", tier)
                assert_same_bits(base, f"{base}_{tier[:4]}")
                where = "disk tier" if tier == "tier" else "NUMA node 0"
                assert f"GiB more on {where})" in p.stdout, p.stdout
                offload_s = timing(f"{base}_{tier[:4]}")[0]["offload_s"]
                assert np.all(offload_s >= 0) and np.all(offload_s < timing(base)[0]["seconds"] * 10), offload_s
            assert os.listdir("tier") == [], os.listdir("tier")
    assert np.all(timing("fp32_none")[0]["offload_s"] == 0)


@case
def offloaded_activations_resume_bit_exactly_and_follow_the_ring():
    """A run on disk stopped at step 2 and resumed ends with the uninterrupted run's bits; so do
    runs moving only the first 1 or 2 layers (--offload-layers); with cp = 2 (each rank its own
    file) it trains the in-memory cp = 2 run's bits."""
    fixture()
    train("whole", "--checkpointing", "attention")
    for n in ("1", "2"):
        p = train(f"first{n}", "--checkpointing", "attention", "--offload-activations", "tier", "--offload-layers", n)
        assert f"more on disk tier, the first {n} layers')" in p.stdout, p.stdout
        assert_same_bits("whole", f"first{n}")
    p = run(*command_of_tiny_run("split", "--batch-size", "2", "--grad-accum", "2", "--checkpointing", "attention",
                                 "--offload-activations", "tier", "--checkpoint-every", "2", "--stop-at", "2",
                                 steps=4))
    assert p.returncode == 85, (p.returncode, p.stderr)
    train("split", "--checkpointing", "attention", "--offload-activations", "tier", "--checkpoint-every", "2",
          "--resume", "auto")
    assert_same_bits("whole", "split")
    train("cp_mem", "--cp", "2", "--checkpointing", "full", ranks=2)
    train("cp_disk", "--cp", "2", "--checkpointing", "full", "--offload-activations", "tier", ranks=2)
    assert_same_bits("cp_mem", "cp_disk")
    assert os.listdir("tier") == []


@case
def offloaded_optimizer_trains_the_same_bits_and_resumes():
    """The AdamW moments on disk and on NUMA node 0 train the in-memory run's bits (losses,
    weights, moments); with the activations offloaded too and --zero 1 over 2 ranks (each
    rank its share), the in-memory run's; a disk run stopped at step 2 and resumed, the
    uninterrupted run's. The disk's files are gone afterwards."""
    fixture()
    train("mem")
    for tier in ("tier", "numa:0"):
        p = train(f"opt_{tier[:4]}", "--offload-optimizer", tier)
        assert_same_bits("mem", f"opt_{tier[:4]}")
        where = "disk tier" if tier == "tier" else "NUMA node 0"
        assert f"streaming through the update (0.00 GiB on {where})" in p.stdout, p.stdout
    p = run(*command_of_tiny_run("split", "--batch-size", "2", "--grad-accum", "2", "--offload-optimizer", "tier",
                                 "--checkpoint-every", "2", "--stop-at", "2", steps=4))
    assert p.returncode == 85, (p.returncode, p.stderr)
    train("split", "--offload-optimizer", "tier", "--checkpoint-every", "2", "--resume", "auto")
    assert_same_bits("mem", "split")
    train("z1_mem", "--dp", "2", "--zero", "1", ranks=2)
    train("z1_tier", "--dp", "2", "--zero", "1", "--offload-optimizer", "tier", "--offload-activations", "tier",
          ranks=2)
    assert_same_bits("z1_mem", "z1_tier")
    assert os.listdir("tier") == [], os.listdir("tier")


@case
def offloaded_master_weights_train_the_same_bits_and_resume():
    """bf16 with the fp32 master weights beside the moments on disk and on NUMA node 0 trains
    the in-memory run's bits (losses, weights, moments), also through a stop at step 2 and a
    resume; the start-up line says where the master is; what cannot work is refused."""
    fixture()
    bf16 = ("--precision", "bf16")
    train("mem", *bf16)
    for tier in ("tier", "numa:0"):
        p = train(f"master_{tier[:4]}", *bf16, "--offload-optimizer", tier, "--offload-master-weights")
        assert_same_bits("mem", f"master_{tier[:4]}")
        where = "disk tier" if tier == "tier" else "NUMA node 0"
        assert f"(the fp32 master's 0.00 GiB on {where})" in p.stdout, p.stdout
    flags = (*bf16, "--offload-optimizer", "tier", "--offload-master-weights", "--checkpoint-every", "2")
    p = run(*command_of_tiny_run("split", "--batch-size", "2", "--grad-accum", "2", *flags, "--stop-at", "2", steps=4))
    assert p.returncode == 85, (p.returncode, p.stderr)
    train("split", *flags, "--resume", "auto")
    assert_same_bits("mem", "split")
    assert os.listdir("tier") == [], os.listdir("tier")
    base = ["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600"]
    expect_error(base + ["--offload-master-weights", *bf16], "but none is given", "add --offload-optimizer")
    expect_error(base + ["--offload-master-weights", "--offload-optimizer", "tier"], "needs --precision bf16")
    expect_error(["--oversubscribe"] + base + ["--offload-master-weights", "--offload-optimizer", "tier", *bf16, "--dp", "2",
                                             "--zero", "1"], "use --zero 0 with it", ranks=2)
    assert not os.path.exists("r")


@case
def offload_with_three_layers_or_fewer_moves_nothing():
    ok("init", "-o", "m.h5", "--preset", "tiny")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "4", "--doc-length", "300", "-o", "d.h5")
    os.mkdir("tier")
    p = ok("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600",
           "--offload-activations", "tier", "--dry-run")
    assert "--offload-activations moves nothing: a model of 2 layers keeps the last 3 in memory" in p.stdout, p.stdout


def estimate_gib(*flags):
    """The activations' and the scratch's GiB of the memory estimate of 256 sequences a micro-batch."""
    p = ok("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "est", "--seq-len", "600",
           "--batch-size", "256", "--dry-run", *flags)
    line = next(l for l in p.stdout.splitlines() if l.startswith("memory estimate per rank"))
    gib = lambda part: float(line.split(f", {part} ")[1].split(" GiB")[0])  # noqa: E731
    return gib("activations"), gib("scratch"), line


@case
def tiled_mlp_trains_the_untiled_losses_with_less_memory():
    """--mlp-tile: fp32 and bf16 under every checkpointing policy, tp = 2 with sequence
    parallelism and cp = 2: the losses are the untiled run's to rounding (the weight gradients
    are summed tile by tile); the estimate's activations shrink where the MLP's gate and up were
    kept (gate and up; with full checkpointing, the one shared set's) and so does the scratch;
    the start-up line names the tile."""
    fixture()
    for precision, rtol in (("fp32", 2e-5), ("bf16", 2e-3)):
        for policy in ("none", "attention", "full"):
            flags = ["--precision", precision, "--checkpointing", policy]
            train(f"u_{precision}_{policy}", *flags)
            train(f"t_{precision}_{policy}", *flags, "--mlp-tile", "112")
            lu, lt = timing(f"u_{precision}_{policy}")[0]["loss"], timing(f"t_{precision}_{policy}")[0]["loss"]
            assert np.allclose(lu, lt, rtol=rtol, atol=0), (precision, policy, lu, lt)
            (au, su, _), (at, st, line) = estimate_gib(*flags), estimate_gib(*flags, "--mlp-tile", "112")
            assert "MLP in tiles of 112" in line, line
            assert at < au and st < su, (policy, au, at, su, st)
    ok("init", "-o", "m260.h5", "--preset", "tiny", "--num-hidden-layers", "6", "--vocab-size", "260")  # tp 2 splits it
    for name, model, flags in (("tp", "m260.h5", ["--tp", "2", "--tp-sequence-parallel"]), ("cp", "m.h5", ["--cp", "2"])):
        train(f"{name}_u", *flags, ranks=2, model=model)
        train(f"{name}_t", *flags, "--mlp-tile", "64", ranks=2, model=model)
        lu, lt = timing(f"{name}_u")[0]["loss"], timing(f"{name}_t")[0]["loss"]
        assert np.allclose(lu, lt, rtol=2e-5, atol=0), (name, lu, lt)


@case
def bad_offload_tier_is_refused_before_training():
    fixture()
    base = ["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600"]
    expect_error(base + ["--offload-activations", "nowhere"], "--offload-activations 'nowhere' is not a directory",
                 "numa:N")
    expect_error(base + ["--offload-activations", "numa:x"], "numa:N takes a NUMA node number")
    expect_error(base + ["--offload-activations", "numa:4096"], "--offload-activations numa:4096: this machine's NUMA nodes are 0-")
    expect_error(base + ["--offload-optimizer", "nowhere"], "--offload-optimizer 'nowhere' is not a directory")
    expect_error(base + ["--offload-layers", "2"], "--offload-layers 2 says how many layers", "add --offload-activations")
    expect_error(base + ["--offload-activations", "tier", "--offload-layers", "4"],
                 "a model of 6 layers can move at most 3", "give 0 to 3")
    assert not os.path.exists("r")


if __name__ == "__main__":
    sys.exit(cc.main())
