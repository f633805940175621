#!/usr/bin/python3
"""Context extension: a run started from another run's checkpoint (--init-from, its AdamW
moments with --init-moments, RoPE changes) and sequence-length stages inside one run
(--seq-len-schedule): what they start from, how they resume, what they refuse.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/curriculum_cases.py --lctrain build/app/lctrain CASE
"""
import os
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, expect_error, ok, run, timing  # noqa: E402

# Tiny model, 16 documents of 300 tokens; the schedule trains steps 1-3 at 200 tokens,
# 4-5 at 400 and 6-8 at --seq-len 600 (every length divisible by 2 x cp = 4).
COMMON = ["--data", "d16.h5", "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "32",
          "--block-k", "32", "--peak-gflops", "100"]
SCHEDULE = ["--seq-len", "600", "--seq-len-schedule", "200:3,400:2", "--steps", "8"]


def fixture():
    ok("init", "-o", "m.h5", "--preset", "tiny")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "16", "--doc-length", "300", "-o", "d16.h5")


def train(run_dir, *extra, model="m.h5", ranks=None):
    args = ["train", "--model", model, *COMMON, "--run-dir", run_dir, *extra]
    return run("--oversubscribe", *args, ranks=ranks) if ranks else run(*args)


def losses(run_dir, column="loss"):
    """{step: value}, the last run's row of each step."""
    steps = timing(run_dir)[0]
    return {int(s): v for s, v in zip(steps["step"], steps[column])}


def arrays(path, prefix=""):
    with h5py.File(path, "r") as f:
        out = {}
        f.visititems(lambda n, o: out.__setitem__(n, o[:]) if isinstance(o, h5py.Dataset) else None)
    return {n[len(prefix):]: a for n, a in out.items() if n.startswith(prefix)}


def ckpt(run_dir, step):
    return f"{run_dir}/checkpoints/step_{step:08d}.h5"


def assert_schedule_resume_is_bit_exact(ranks=None, *degrees):
    fixture()
    straight = train("straight", *SCHEDULE, "--checkpoint-every", "1", "--keep-every", "1", *degrees, ranks=ranks)
    assert straight.returncode == 0, straight.stderr
    assert "sequence lengths (--seq-len-schedule): 200 for steps 1-3, 400 for 4-5, 600 for 6-8" in straight.stdout
    assert "stage 2 of 3 from step 4: sequences of 400 tokens" in straight.stdout, straight.stdout
    # Stopped inside stage 1 (step 2), exactly at its end (step 3), then run to the end.
    for stop in (2, 3):
        p = train("split", *SCHEDULE, "--checkpoint-every", "1", "--keep-every", "1", "--stop-at", str(stop),
                  "--resume", "auto", *degrees, ranks=ranks)
        assert p.returncode == 85, (p.returncode, p.stdout, p.stderr)
    last = train("split", *SCHEDULE, "--checkpoint-every", "1", "--keep-every", "1", "--resume", "auto", *degrees, ranks=ranks)
    assert last.returncode == 0, last.stderr
    assert "resumed from 'split/checkpoints/step_00000003.h5' at step 3 (restart 2" in last.stdout
    a, b = losses("straight"), losses("split")
    assert list(a) == list(range(1, 9)) and a == b, (a, b)  # identical floats, every step
    assert list(losses("split", "seq_len").values()) == [200] * 3 + [400] * 2 + [600] * 3
    ta, tb = arrays(ckpt("straight", 8)), arrays(ckpt("split", 8))
    differ = [n for n in ta if n != "ranks/state" and not np.array_equal(ta[n], tb[n])]
    assert not differ, f"not bitwise identical: {differ}"
    # A checkpoint at a stage's last step holds the next stage's start: (epoch 0, cursor 0).
    with h5py.File(ckpt("straight", 3), "r") as f:
        s = f["train_state"].attrs
        assert (s["data_epoch"], s["data_cursor"]) == (0, 0), dict(s)
        assert s["seq_len_schedule"] == "200:3,400:2" and s["seq_len"] == 600
    with h5py.File(ckpt("straight", 2), "r") as f:
        assert f["train_state"].attrs["data_cursor"] == 2  # 2 steps of one sequence (dp 1)
    print(f"schedule resume bit-exact over {ranks or 1} rank(s): 8 losses, {len(ta)} arrays")


@case
def schedule_resume_is_bit_exact_inside_a_stage_and_at_its_boundary():
    assert_schedule_resume_is_bit_exact()


@case
def schedule_resume_is_bit_exact_with_cp2():
    assert_schedule_resume_is_bit_exact(2, "--cp", "2")


@case
def schedule_with_cp2_matches_one_rank():
    """Every stage's shorter sequences go through each cp attention built for --seq-len."""
    fixture()
    ok(*["train", "--model", "m.h5", *COMMON, "--run-dir", "one", *SCHEDULE])
    for algo in ("ring", "allgather", "ulysses"):
        p = train(algo, *SCHEDULE, "--cp", "2", "--cp-algo", algo, ranks=2)
        assert p.returncode == 0, p.stderr
        assert_matches_one_rank(algo, f"cp=2 ({algo}) vs one rank over 3 stages")


def assert_matches_one_rank(run_dir, what):
    """The 8 scheduled steps' losses of `run_dir` equal the one-rank run's to 1e-5."""
    a, b = losses("one"), losses(run_dir)
    assert list(a) == list(b) == list(range(1, 9)), (a, b)
    worst = max(abs(a[s] - b[s]) for s in a)
    print(f"{what}: largest loss difference {worst:.2e}")
    assert worst < 1e-5, (what, a, b)


@case
def schedule_with_hybrid_cp4_matches_one_rank():
    fixture()
    ok(*["train", "--model", "m.h5", *COMMON, "--run-dir", "one", *SCHEDULE])
    p = train("hybrid", *SCHEDULE, "--cp", "4", "--cp-algo", "hybrid", "--ulysses-degree", "2", ranks=4)
    assert p.returncode == 0, p.stderr
    assert_matches_one_rank("hybrid", "cp=4 (hybrid, Ulysses 2 x ring 2) vs one rank over 3 stages")


@case
def schedule_resumes_across_a_degree_change():
    """Stopped inside stage 2 on cp 2, resumed on one rank: the stage's data position (in
    sequences of its length) carries over; the losses match the straight run's to rounding."""
    fixture()
    ok(*["train", "--model", "m.h5", *COMMON, "--run-dir", "one", *SCHEDULE])
    p = train("moved", *SCHEDULE, "--cp", "2", "--stop-at", "4", ranks=2)
    assert p.returncode == 85, (p.returncode, p.stdout, p.stderr)
    p = train("moved", *SCHEDULE, "--resume", "auto")
    assert p.returncode == 0, p.stderr
    assert "resuming across a layout change" in p.stdout, p.stdout
    assert_matches_one_rank("moved", "schedule resumed from cp 2 on one rank")


@case
def schedule_equals_chaining_runs_at_the_boundary():
    """Stage 1 as its own run, then --init-from its last checkpoint at the next length: the
    chained run's first step sees the same weights and the same sequences as the scheduled
    run's first step of stage 2 (each stage starts its own data order), so its loss and
    gradient norm are bitwise the same. Later steps differ: the learning rate and AdamW's
    bias correction follow each run's own step count."""
    fixture()
    ok(*["train", "--model", "m.h5", *COMMON, "--run-dir", "sched", *SCHEDULE, "--checkpoint-every", "3",
         "--keep-every", "3"])
    # The short run has the scheduled run's learning rates for steps 1-3 (same --steps 8).
    p = train("short", "--seq-len", "200", "--steps", "8", "--stop-at", "3")
    assert p.returncode == 85, (p.returncode, p.stdout, p.stderr)
    # The weights the chained run starts from are the scheduled run's at the boundary.
    a, b = arrays(ckpt("short", 3)), arrays(ckpt("sched", 3))
    weights = [n for n in a if "/" not in n]
    assert len(weights) > 10 and all(np.array_equal(a[n], b[n]) for n in weights)
    for moments in ([], ["--init-moments"]):
        d = "long" + "".join(moments)
        p = train(d, "--seq-len", "400", "--steps", "2", *moments, model=ckpt("short", 3))
        assert p.returncode == 0, p.stderr
        assert "initialised from checkpoint 'short/checkpoints/step_00000003.h5' (step 3" in p.stdout, p.stdout
        s, c = losses("sched"), losses(d)
        assert losses("short") == {k: s[k] for k in (1, 2, 3)}
        assert c[1] == s[4], (c, s)
        assert losses(d, "grad_norm")[1] == losses("sched", "grad_norm")[4]
    print("stage 2's first step equals the chained run's first step (loss and |g|, bitwise)")


@case
def init_from_records_its_origin_and_changes_rope():
    fixture()
    p = train("a", "--seq-len", "200", "--steps", "3")
    assert p.returncode == 0, p.stderr
    with h5py.File(ckpt("a", 3), "r") as f:  # a run from a model file records it, step 0
        s = f["train_state"].attrs
        assert (s["init_from"], s["init_from_step"], s["init_from_run_id"]) == ("m.h5", 0, "")
    p = run("train", "--init-from", ckpt("a", 3), *COMMON, "--run-dir", "b", "--seq-len", "400",
            "--steps", "2", "--rope-theta", "500000", "--rope-scaling", "yarn", "--rope-factor", "2",
            "--rope-original-max-position-embeddings", "256")
    assert p.returncode == 0, p.stderr
    assert "changed: rope_theta 10000 -> 500000, rope_scaling.rope_type (none) -> yarn, " \
           "rope_scaling.factor 1 -> 2" in p.stdout, p.stdout
    with h5py.File(ckpt("a", 3), "r") as f:
        run_id, fp = f["train_state"].attrs["run_id"], f["train_state"].attrs["data_fingerprint"]
    with h5py.File(ckpt("b", 2), "r") as f:
        s, r = f["train_state"].attrs, f.attrs
        assert s["init_from"] == ckpt("a", 3) and s["init_from_step"] == 3
        assert s["init_from_run_id"] == run_id and s["run_id"] != run_id
        assert s["init_from_data_fingerprint"] == fp and s["step"] == 2
        assert r["rope_theta"] == 500000 and r["rope_scaling.rope_type"] == "yarn"
        assert r["rope_scaling.factor"] == 2
    with h5py.File("b/timing.h5", "r") as f:
        c = f["provenance/config"].attrs
        assert c["train.init_from_step"] == 3 and c["train.init_from_run_id"] == run_id
    # A resume takes the same options: the checkpoint's config is the changed one.
    p = run("train", "--init-from", ckpt("a", 3), *COMMON, "--run-dir", "b", "--seq-len", "400",
            "--steps", "3", "--rope-theta", "500000", "--rope-scaling", "yarn", "--rope-factor", "2",
            "--rope-original-max-position-embeddings", "256", "--resume", "auto")
    assert p.returncode == 0 and "resumed from 'b/checkpoints/step_00000002.h5'" in p.stdout, p.stderr
    with h5py.File(ckpt("b", 3), "r") as f:
        assert f["train_state"].attrs["init_from_step"] == 3  # kept by the resume


def assert_init_moments(ranks=None, *degrees, model="m.h5"):
    """The moments after a first step from a checkpoint's moments are beta * those plus the
    first step's own contribution, which a run without --init-moments holds alone (the same
    weights and batch give the same gradient): m = b1 m0 + (1 - b1) g, v = b2 v0 + (1 - b2) g^2."""
    fixture()
    p = train("a", "--seq-len", "200", "--steps", "3", *degrees, model=model, ranks=ranks)
    assert p.returncode == 0, p.stderr
    for d, extra in (("with", ["--init-moments"]), ("without", [])):
        p = train(d, "--seq-len", "200", "--steps", "1", *extra, *degrees, model=ckpt("a", 3), ranks=ranks)
        assert p.returncode == 0, p.stderr
        assert ("AdamW moments from 'a/checkpoints/step_00000003.h5' (step 3)" in p.stdout) == bool(extra)
    src, w, wo = (arrays(ckpt(r, s), "optimizer/") for r, s in (("a", 3), ("with", 1), ("without", 1)))
    assert src.keys() == w.keys() == wo.keys() and len(src) > 10
    for name in src:
        beta = 0.9 if name.startswith("exp_avg/") else 0.95
        want = np.float32(beta) * src[name] + wo[name]
        # fp32 rounding of the two terms: an ulp or so of the larger of them
        scale = np.abs(src[name]).max() + np.abs(wo[name]).max()
        assert np.allclose(w[name], want, rtol=1e-5, atol=1e-6 * scale), name
        assert not np.allclose(w[name], wo[name], rtol=1e-3, atol=0), name  # the moments count
    assert losses("with") == losses("without")  # the same first forward pass
    print(f"--init-moments over {ranks or 1} rank(s): {len(src)} moment arrays carried")


@case
def init_moments_are_the_checkpoints_moments():
    assert_init_moments()


@case
def init_moments_under_zero1_dp2():
    assert_init_moments(2, "--zero", "1", "--dp", "2")


@case
def init_moments_under_tp2():
    """Each tp rank reads only its slices of the checkpoint's moments (the norms whole)."""
    ok("init", "-o", "m260.h5", "--preset", "tiny", "--vocab-size", "260")  # tp 2 splits 260
    assert_init_moments(2, "--tp", "2", model="m260.h5")


@case
def bad_curriculum_inputs():
    fixture()
    base = ["train", "--model", "m.h5", *COMMON, "--run-dir", "bad", "--seq-len", "600", "--steps", "8"]
    expect_error(base + ["--init-moments"], "--init-moments", "'m.h5' is a model file", "give a checkpoint")
    expect_error(base + ["--seq-len-schedule", "200"], "'200' is not LEN:STEPS", "512:200,1024:100")
    expect_error(base + ["--seq-len-schedule", "400:2,200:3"], "length 200 does not grow from 400")
    expect_error(base + ["--seq-len-schedule", "600:2"], "length 600 is not below --seq-len 600")
    expect_error(base + ["--seq-len-schedule", "200:0"], "stage 200:0 has no steps")
    expect_error(base + ["--seq-len-schedule", "200:4,400:4"], "takes 8 steps before --seq-len 600",
                 "leaving none of --steps 8")
    expect_error(base + ["--seq-len-schedule", "200:2,"], "has an empty stage")
    expect_error(base + ["--rope-factor", "4"], "--rope-factor (rope_scaling.factor) given but "
                 "--rope-scaling keep (the model's own scaling, unchanged) does not use it")
    expect_error(["--oversubscribe", *base, "--cp", "2", "--seq-len-schedule", "202:2"],
                 "--seq-len-schedule length 202 is not divisible by 2 x cp = 4", ranks=2)
    assert not os.path.exists("bad"), "a refused run wrote its run directory"
    # A new run from a checkpoint of the run directory --force would set aside.
    p = run("train", "--model", "m.h5", *COMMON, "--run-dir", "bad", "--seq-len", "200", "--steps", "1")
    assert p.returncode == 0, p.stderr
    expect_error(["train", "--init-from", ckpt("bad", 1), *COMMON, "--run-dir", "bad", "--seq-len", "600",
                  "--steps", "2", "--force", "--init-moments"],
                 "is a checkpoint of --run-dir 'bad', which --force sets aside", keep=[ckpt("bad", 1)])
    # --dry-run sizes memory for the longest stage: --seq-len. ('bad' holds the run above:
    # a dry run refuses a fresh start there as the run does, so it is given --force.)
    p = ok(*base, "--seq-len-schedule", "200:2", "--dry-run", "--force")
    assert "600 tokens per rank" in p.stdout, p.stdout
    # A resume with another schedule is refused, naming both.
    p = run(*base, "--seq-len-schedule", "200:2", "--stop-at", "1", "--force")
    assert p.returncode == 85, p.stderr
    expect_error(base + ["--seq-len-schedule", "400:2", "--resume", "auto"],
                 "written with --seq-len-schedule '200:2' but this run has '400:2'")


@case
def resume_of_a_run_from_before_schedules_continues_its_table():
    """A table and checkpoint of an lctrain without seq_len column or schedule attribute (both
    removed here, with the eval columns, later still) resume: the earlier rows were all at
    --seq-len, and had no evaluation."""
    fixture()
    p = train("old", "--seq-len", "200", "--steps", "4", "--stop-at", "2")
    assert p.returncode == 85, p.stderr
    with h5py.File("old/timing.h5", "a") as f:
        for c in ("seq_len", "eval_loss", "eval_accuracy", "eval_retrieval"):
            del f[f"steps/{c}"]
            f["steps"].attrs["columns"] = f["steps"].attrs["columns"].replace(f" {c}", "")
    with h5py.File(ckpt("old", 2), "a") as f:
        del f["train_state"].attrs["seq_len_schedule"]
    p = train("old", "--seq-len", "200", "--steps", "4", "--resume", "auto")
    assert p.returncode == 0, p.stderr
    assert list(losses("old", "seq_len").values()) == [200] * 4
    assert np.all(np.isnan(list(losses("old", "eval_loss").values())))


if __name__ == "__main__":
    sys.exit(cc.main())
