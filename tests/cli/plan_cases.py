#!/usr/bin/python3
"""lctrain plan: the layouts it ranks, their memory against train's own estimate for the same
flags, and what it refuses.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/plan_cases.py --lctrain build/app/lctrain CASE
"""
import os
import re
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, expect_error, good_model, ok, run  # noqa: E402

ROW = re.compile(r"^\s*(\d+)\s+([\d.]+)\s+(\d+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)\s+([\d.]+)"
                 r"\s+([\d.]+)\s+([\d.]+)\s+(\d+)\s+(\d+)\s+(\d+)\s+(\d+) rank\(s\)/node x --threads (\d+): train (.*)$")


def plan_rows(*args):
    p = ok("plan", *args)
    rows = [ROW.match(l) for l in p.stdout.splitlines()]
    return p, [r for r in rows if r]


@case
def plan_ranks_layouts_and_matches_train_memory():
    """Rows come sorted by predicted step time, every one with flags train accepts, and each
    row's memory per rank is what train --dry-run prints for the same flags."""
    # 260 vocabulary rows (the byte tokenizer's 259 + 1): --tp 2 splits the model.
    ok("init", "-o", "s.h5", "--preset", "small", "--vocab-size", "260")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "8", "--doc-length", "512", "-o", "d.h5")
    p, rows = plan_rows("--model", "s.h5", "--seq-len", "2048", "--global-batch", "2", "--cores-per-node", "2",
                        "--precision", "fp32", "--top", "100")
    assert rows, p.stdout
    steps = [float(r.group(2)) for r in rows]
    assert steps == sorted(steps), steps
    seen = {(r.group(14), r.group(16)) for r in rows}
    assert len(seen) == len(rows), "a layout listed twice"
    assert any("--cp 2" in r.group(16) for r in rows) and any("--dp 2" in r.group(16) for r in rows), p.stdout
    assert any("--checkpointing full" in r.group(16) for r in rows), p.stdout
    assert any("--tp 2" in r.group(16) for r in rows), p.stdout
    assert any("--tp 2 --tp-sequence-parallel" in r.group(16) for r in rows), p.stdout
    checked, per_ranks, tp_checked = 0, {1: 0, 2: 0}, False
    for r in rows:
        ranks, threads, flags = int(r.group(14)), int(r.group(15)), r.group(16).split()
        tp = "--tp 2 --tp-sequence-parallel" in r.group(16)
        if per_ranks[ranks] >= 2 and (tp_checked or not tp):
            continue  # two layouts of each rank count (and a sequence-parallel --tp 2 one) keep the case short
        per_ranks[ranks] += 1
        tp_checked |= tp
        d = ok("--threads", threads, "--oversubscribe", "train", "--model", "s.h5", "--data", "d.h5",
               "--run-dir", f"run{checked}", "--seq-len", "2048", "--dry-run", *flags, ranks=ranks)
        m = re.search(r"memory estimate per rank \(\w+\): ([\d.]+) GiB", d.stdout)
        assert m, d.stdout
        plan_gib = float(r.group(4))
        print(f"{ranks} rank(s) {' '.join(flags)}: plan {plan_gib:.2f} GiB, train {m.group(1)} GiB")
        # One estimate; only the process's own memory, measured by each, may differ a little.
        assert abs(float(m.group(1)) - plan_gib) <= 0.021, (flags, m.group(1), plan_gib)
        checked += 1
    assert checked == 5 and tp_checked, p.stdout


@case
def plan_refuses_bad_input():
    good_model()
    expect_error(["plan", "--model", "m.h5", "--precision", "fp16"], "--precision", "'fp16' is not one of fp32, bf16")
    expect_error(["plan", "--model", "m.h5", "--zero", "0,4"], "--zero", "'4' is not one of 0, 1, 2, 3")
    expect_error(["plan", "--model", "m.h5", "--cp-algo", "ring,"], "--cp-algo", "'' is not one of")
    expect_error(["plan", "--model", "m.h5", "--nodes", "0"], "--nodes", code=2)
    expect_error(["plan", "--model", "nothing.h5"], "nothing.h5")
    expect_error(["plan", "--model", "m.h5", "--mem-per-node", "0.0001", "--precision", "fp32",
                  "--checkpointing", "full"], "tokens per step fits in", "use more nodes")
    expect_error(["plan", "--model", "m.h5", "--seq-len", "600"], "plan runs on one rank", ranks=2)
    expect_error(["plan", "--model", "m.h5", "--mlp-tile", "0,x"], "--mlp-tile", "'x' is not a count of tokens")
    expect_error(["plan", "--model", "m.h5", "--offload-activations", "nowhere"], "'nowhere' is not a directory")
    expect_error(["plan", "--model", "m.h5", "--mem-per-node", "0.0001", "--precision", "fp32"],
                 "tokens per step fits in", "or give a tier (--offload-activations", "--mlp-tile 0,4096")


@case
def plan_offloads_activations_only_where_moving_costs_less_than_recomputing():
    """In 0.8 GiB an 8-layer model at S = 8,192 keeps its `none` activations only with some
    layers' on a tier. With a fast tier (given) the first layout is `none` with as few layers
    offloaded as fit, its memory what train --dry-run prints for the same flags, and one line
    per choice says why; with a tier too slow to hide the moves it recomputes (`full`, in
    memory) instead. Without a rate the tier's is measured."""
    ok("init", "-o", "s8.h5", "--preset", "small", "--vocab-size", "260", "--num-hidden-layers", "8")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "2", "--doc-length", "8192", "-o", "d.h5")
    os.mkdir("tier")
    base = ("--model", "s8.h5", "--seq-len", "8192", "--global-batch", "1", "--cores-per-node", "1", "--precision",
            "fp32", "--zero", "0", "--cp-algo", "ring", "--mem-per-node", "0.8")
    p, rows = plan_rows(*base, "--tier-gbs", "1000")
    flags = rows[0].group(16)
    assert "--checkpointing none" in flags and "--offload-activations DIR --offload-layers" in flags, p.stdout
    moved = int(flags.split("--offload-layers ")[1].split()[0])
    assert 1 <= moved <= 5 and float(rows[0].group(4)) <= 0.95 * 0.8, p.stdout
    assert f"layers 0-{moved - 1}: offload what --checkpointing none keeps" in p.stdout and "(hidden)" in p.stdout, p.stdout
    assert f"layers {moved}-7: keep what --checkpointing none keeps in memory" in p.stdout, p.stdout
    d = ok("train", "--data", "d.h5", "--run-dir", "r", "--dry-run", "--model", "s8.h5", "--seq-len", "8192",
           *flags.replace("DIR", "tier").split())
    m = re.search(r"memory estimate per rank \(\w+\): ([\d.]+) GiB", d.stdout)
    assert m and abs(float(m.group(1)) - float(rows[0].group(4))) <= 0.021, (m and m.group(1), rows[0].group(4))
    p, rows = plan_rows(*base, "--tier-gbs", "0.000001")
    assert "--checkpointing full" in rows[0].group(16) and "--offload" not in rows[0].group(16), p.stdout
    assert "layers 0-7: keep its input (--checkpointing full) in memory: it fits" in p.stdout, p.stdout
    p = ok("plan", *base, "--offload-activations", "tier", "--top", "1")
    assert re.search(r"tier: disk tier writes [\d.]+ GB/s, reads [\d.]+ GB/s \(measured\)", p.stdout), p.stdout
    assert os.listdir("tier") == []


@case
def plan_moves_the_optimizer_state_where_the_activations_do_not_make_room():
    """A 100 M-parameter model in bf16 at S = 512 needs about 1.77 GiB in memory: in 1.6 GiB a node
    the first layout puts the AdamW moments on the tier (--offload-optimizer), in 1.25 GiB the
    fp32 master weights too; each layout's memory is train --dry-run's for its flags, and a line
    says where the optimizer's state went."""
    ok("init", "-o", "big.h5", "--preset", "small", "--hidden-size", "1024", "--intermediate-size", "2816",
       "--num-hidden-layers", "8", "--vocab-size", "260")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "2", "--doc-length", "512", "-o", "d.h5")
    os.mkdir("tier")
    for mem, master in (("1.6", False), ("1.25", True)):
        p, rows = plan_rows("--model", "big.h5", "--seq-len", "512", "--global-batch", "1", "--cores-per-node", "1",
                            "--precision", "bf16", "--zero", "0", "--mem-per-node", mem, "--tier-gbs", "2", "--top", "1")
        flags = rows[0].group(16)
        assert "--offload-optimizer DIR" in flags and ("--offload-master-weights" in flags) == master, (mem, p.stdout)
        assert ("AdamW moments and fp32 master weights: on disk DIR" if master else "AdamW moments: on disk DIR") \
            in p.stdout, p.stdout
        d = ok("train", "--data", "d.h5", "--run-dir", "r", "--dry-run", "--model", "big.h5", "--seq-len", "512",
               *flags.replace("DIR", "tier").split())
        m = re.search(r"memory estimate per rank \(\w+\): ([\d.]+) GiB", d.stdout)
        assert m and abs(float(m.group(1)) - float(rows[0].group(4))) <= 0.021, (m and m.group(1), rows[0].group(4))



@case
def plan_answers_absurd_counts_at_once_and_names_the_rule_that_rules_layouts_out():
    """Counts past any machine are refused by the option itself; within the caps the search
    (divisors by factorisation) answers at once; an empty plan names the rule that emptied it
    (here: dp never divides the global batch), not memory."""
    good_model()
    started = time.monotonic()
    expect_error(["plan", "--model", "m.h5", "--nodes", "10000000000000", "--cores-per-node", "2"],
                 "--nodes", "10000000000000 is not in [1, 1000000]", code=2)
    expect_error(["plan", "--model", "m.h5", "--global-batch", "4000000000"], "--global-batch", code=2)
    expect_error(["plan", "--model", "m.h5", "--nodes", "100000", "--global-batch", "2", "--seq-len", "600",
                  "--cores-per-node", "2", "--mem-per-node", "64"],
                 "passes train's rules", "does not divide --global-batch 2", "--global-batch that is a multiple")
    # 10^11 ranks: a divisor search over every integer below that never ended.
    expect_error(["plan", "--model", "m.h5", "--nodes", "1000000", "--cores-per-node", "100000",
                  "--global-batch", "3", "--seq-len", "600", "--mem-per-node", "64"],
                 "does not divide --global-batch 3")
    assert time.monotonic() - started < 60, time.monotonic() - started
    p = run("plan", "--model", "m.h5", "--nodes", "100000", "--global-batch", "2", "--seq-len", "600",
            "--cores-per-node", "2", "--mem-per-node", "64")
    assert "fits in" not in p.stderr and "memory" not in p.stderr, p.stderr


@case
def plan_calibrates_a_large_vocabulary_on_a_slice_and_scales_its_head():
    """A vocabulary past 8,192 rows is calibrated on 8,192 of them and the LM head's time
    scaled to the whole (its work is rows x tokens), so a large model calibrates in seconds:
    the head's per-token cost of a 65,536-row model comes out about 8 times that of the same
    model at 8,192 rows (not 1: the scaling is applied), the layers' about the same, and the
    start-up says what it measured."""
    rates = {}
    for vocab in (8192, 65536):
        ok("init", "-o", f"v{vocab}.h5", "--preset", "tiny", "--vocab-size", str(vocab))
        p = ok("--threads", "1", "plan", "--model", f"v{vocab}.h5", "--seq-len", "1024", "--global-batch", "1",
               "--cores-per-node", "1", "--precision", "fp32", "--checkpointing", "none", "--top", "1")
        m = re.search(r"fp32 on 1 thread\(s\): per layer ([\d.e+-]+) core-us/token .*?, rest ([\d.e+-]+) "
                      r"core-us/token", p.stdout)
        assert m, p.stdout
        rates[vocab] = (float(m.group(1)), float(m.group(2)))
        scaled = "(its LM head on 8192 of its 65536 vocabulary rows, scaled)"
        assert (scaled in p.stdout) == (vocab == 65536), p.stdout
    head, layer = rates[65536][1] / rates[8192][1], rates[65536][0] / rates[8192][0]
    print(f"65,536 rows against 8,192: head x{head:.2f}, layer x{layer:.2f}")
    assert 4 < head < 16, rates
    assert 0.5 < layer < 2, rates


@case
def plan_warns_when_its_calibration_disagrees_with_itself():
    """A busy host: a process spinning on CPU 1 while plan's 2-thread probes run there makes each
    core of the 2-thread run far slower than the 1-thread run on CPU 0 alone; plan says the
    calibration disagrees with itself instead of predicting from it silently."""
    if len(os.sched_getaffinity(0)) < 2 or 1 not in os.sched_getaffinity(0):
        print("SKIP: needs CPUs 0 and 1")
        sys.exit(77)
    # 30m: its layers scale to 2 threads on a quiet host (measured per-core 1.03-1.07x one thread's;
    # the small preset's hidden 256 already ran 1.5x slower per core and warned without a hog).
    ok("init", "-o", "m.h5", "--preset", "30m")
    # Two hogs: plan's thread on CPU 1 gets about a third of it, far past the 1.5x bound (one hog
    # measured 1.36x once, beside other tests; the test now runs alone: RUN_SERIAL).
    hogs = [subprocess.Popen(["taskset", "-c", "1", "/usr/bin/python3", "-c", "while True: pass"]) for _ in range(2)]
    try:
        p = ok("--threads", "2", "plan", "--model", "m.h5", "--seq-len", "1024", "--global-batch", "1",
               "--cores-per-node", "2", "--precision", "fp32", "--checkpointing", "none", "--top", "1")
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    assert "warning: the calibration disagrees with itself (" in p.stdout, p.stdout
    assert "slower than one thread alone" in p.stdout or "repeats of one probe differed" in p.stdout, p.stdout


@case
def plan_rows_stay_parseable_when_figures_grow_wide():
    """A step of tens of thousands of seconds and terabytes of cp traffic (the tiny preset at
    1M tokens on 2 cores) still leaves a space between every column: each row parses."""
    p, rows = plan_rows("--preset", "tiny", "--seq-len", "1048576", "--global-batch", "1", "--cores-per-node", "2",
                        "--precision", "fp32", "--top", "3")
    table = [l for l in p.stdout.splitlines() if re.match(r"^\s*\d+\s+[\d.]+\s", l)]
    assert rows and len(rows) == len(table), p.stdout
    assert max(float(r.group(2)) for r in rows) > 1000, [r.group(2) for r in rows]


if __name__ == "__main__":
    sys.exit(cc.main())
