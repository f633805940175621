#!/usr/bin/python3
"""Outputs a user reads: the timing table's layout (the same on one rank and on several, and
the pandas lines of docs/files.md on both), an older one-rank table continued by --resume auto,
timestamped step and checkpoint lines, progress lines of eval and prepare, and the plots.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/output_cases.py --lctrain build/app/lctrain CASE
"""
import datetime
import importlib.util
import os
import re
import shutil
import subprocess
import sys
import textwrap

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, good_model, ok, run, timing  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
PLOT = os.path.join(ROOT, "bench", "plot_timing.py")
PLOT_PASSKEY = os.path.join(ROOT, "bench", "plot_passkey.py")
TRAIN = ["train", "--model", "m.h5", "--data", "d16.h5", "--seq-len", "600", "--lr", "3e-3",
         "--warmup-steps", "2", "--block-q", "32", "--block-k", "32", "--peak-gflops", "100"]
RANK_COLUMNS = ["rank_seconds", "rank_attn_s", "rank_comm_s", "rank_allreduce_s", "rank_bytes_sent",
                "rank_peer_wait_s", "rank_work_flop", "rank_steal_s"]
STAMP = r"\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)\] "


def fixture():
    good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "16", "--doc-length", "300", "-o", "d16.h5")


def train(run_dir, *extra, ranks=None):
    """A tiny run; with ranks, context parallelism over all of them."""
    if ranks:
        return ok("--oversubscribe", *TRAIN, "--run-dir", run_dir, "--cp", str(ranks), *extra, ranks=ranks)
    return ok(*TRAIN, "--run-dir", run_dir, *extra)


def assert_layout(run_dir, steps, ranks):
    """Step columns [steps], per-rank columns [steps, ranks], whatever the rank count."""
    with h5py.File(f"{run_dir}/timing.h5", "r") as f:
        for name, d in f["steps"].items():
            want = (steps, ranks) if name in RANK_COLUMNS else (steps,)
            assert d.shape == want, f"{run_dir}: steps/{name} is {d.shape}, wanted {want}"
            assert "unit" in d.attrs and d.attrs["help"], name
        assert set(RANK_COLUMNS) <= set(f["steps"]), list(f["steps"])


@case
def timing_table_has_one_layout_for_every_rank_count():
    fixture()
    train("one", "--steps", "3")
    train("two", "--steps", "3", ranks=2)
    assert_layout("one", 3, 1)
    assert_layout("two", 3, 2)
    with h5py.File("one/timing.h5", "r") as f:
        assert np.all(f["steps/rank_seconds"][:, 0] > 0)
        assert np.allclose(f["steps/rank_comm_s"][:, 0], 0)
    p = ok("inspect", "one/timing.h5")
    assert "3 rows" in p.stdout and "median tokens/s" in p.stdout, p.stdout
    print("[steps] and [steps, ranks] on 1 and on 2 ranks")


@case
def predicted_imbalance_follows_the_documents_of_each_rank():
    """dp 2 over documents of 256 to 2,048 tokens: each rank's predicted work is the model FLOPs of
    its own tokens (attention grows with each document's square). Under --balance none the steps
    where one rank holds a 2,048-token document and the other shorter ones are predicted uneven;
    under --balance cost (the default) the same steps are predicted even, and their
    unbalanced_imbalance is none's prediction; under cp 2 too. The summary gives the figures."""
    good_model()
    ok("prepare", "--synthetic", "passkey", "--doc-lengths", "256,512,1024,2048", "--num-docs", "64", "-o", "mix.h5")
    common = ["--oversubscribe", "train", "--model", "m.h5", "--data", "mix.h5", "--seq-len", "2048",
              "--steps", "8", "--peak-gflops", "100"]
    p = ok(*common, "--dp", "2", "--balance", "none", "--run-dir", "dp", ranks=2)
    q = ok(*common, "--dp", "2", "--run-dir", "dp_cost", ranks=2)
    ok(*common, "--cp", "2", "--run-dir", "cp", ranks=2)
    dp, cost, cp = timing("dp"), timing("dp_cost"), timing("cp")
    pred, work = dp[0]["predicted_imbalance"], dp[0]["rank_work_flop"]
    assert np.allclose(pred, work.max(axis=1) / work.mean(axis=1)), (pred, work)
    assert (pred >= 1).all() and pred.max() > 1.2, pred
    assert (cost[0]["predicted_imbalance"] < 1.01).all(), cost[0]["predicted_imbalance"]
    assert np.allclose(cost[0]["unbalanced_imbalance"], pred, rtol=1e-9), (cost[0]["unbalanced_imbalance"], pred)
    assert (cp[0]["predicted_imbalance"] < 1.01).all(), cp[0]["predicted_imbalance"]
    assert dp[1]["median_predicted_imbalance"] >= 1, dp[1]
    assert re.search(r"imbalance [\d.]+ \(the documents predict [\d.]+\)", p.stdout), p.stdout[-1500:]
    assert re.search(r"imb [\d.]+ \(docs [\d.]+\)", p.stdout), p.stdout[-1500:]
    assert re.search(r"imbalance [\d.]+ \(the documents predict [\d.]+; unbalanced [\d.]+\)", q.stdout), q.stdout[-1500:]
    print("predicted imbalance per step under dp 2:", np.round(pred, 2), "measured:", np.round(dp[0]["imbalance"], 2),
          "balanced:", np.round(cost[0]["predicted_imbalance"], 3), "measured:", np.round(cost[0]["imbalance"], 2))


def readme_pandas_block():
    """The python block of docs/files.md that builds pandas frames from timing.h5, as printed."""
    with open(os.path.join(ROOT, "docs", "files.md")) as f:
        blocks = re.findall(r"```python\n(.*?)```", f.read(), re.S)
    blocks = [textwrap.dedent(b) for b in blocks]  # harmless if the page indents it inside a list item
    found = [b for b in blocks if "pd.DataFrame" in b and "timing.h5" in b]
    assert len(found) == 1, f"wanted one docs/files.md python block with pandas and timing.h5, got {len(found)}"
    return found[0]


@case
def readme_pandas_lines_read_one_rank_and_two_rank_tables():
    try:
        import pandas  # noqa: F401
    except ImportError:
        raise AssertionError("this case runs the pandas lines of docs/files.md: apt-get install python3-pandas")
    fixture()
    code = readme_pandas_block()
    print(code)
    os.makedirs("runs/default")
    for ranks in (1, 2):  # the page's own path: runs/default/passkey/timing.h5
        train("runs/default/passkey", "--steps", "4", "--force", ranks=ranks if ranks > 1 else None)
        scope = {}
        exec(code, scope)  # noqa: S102 - the page's lines, literally
        steps, per_rank = scope["steps"], scope["ranks"]
        assert steps.shape[0] == 4 and list(steps["step"]) == [1, 2, 3, 4], steps
        assert "loss" in steps and "tokens_per_s" in steps, list(steps)
        assert per_rank["rank_seconds"].shape == (4, ranks), per_rank["rank_seconds"].shape
        assert set(per_rank.columns.get_level_values(0)) == set(RANK_COLUMNS), per_rank.columns
        print(f"{ranks} rank(s): steps {steps.shape}, ranks {per_rank.shape}")


@case
def steal_time_is_recorded_per_rank_and_named_when_a_hypervisor_takes_a_share():
    """The share of each step a hypervisor ran other work on a rank's CPUs (the guest's steal
    time): rank_steal_s per rank, steal_frac their mean share, the summary's median and a note
    from 1% up. Rank 1 made to report a quarter of each step stolen (LCT_INJECT_FAULT=steal);
    rank 0 reports this machine's own."""
    fixture()
    p = run("--oversubscribe", *TRAIN, "--run-dir", "s", "--cp", "2", "--steps", "3", ranks=2,
            env={"LCT_INJECT_FAULT": "steal:1:0"})
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    steps, attrs = timing("s")
    stolen, seconds = steps["rank_steal_s"], steps["rank_seconds"]
    assert np.allclose(stolen[:, 1], 0.25 * seconds[:, 1]), (stolen, seconds)
    assert np.all(stolen[:, 0] >= 0) and np.all(stolen[:, 0] <= seconds[:, 0] + 0.02), (stolen, seconds)
    assert np.allclose(steps["steal_frac"], (stolen / seconds).mean(axis=1)), steps["steal_frac"]
    share = float(np.median(steps["steal_frac"][1:]))
    assert abs(attrs["median_steal_frac"] - share) < 1e-12 and share >= 0.125, (attrs["median_steal_frac"], share)
    note = re.search(r"^note: a hypervisor ran other work on the ranks' CPUs for ([\d.]+)% of the steps' time",
                     p.stdout, re.M)
    assert note and abs(float(note.group(1)) - 100 * share) < 0.06, p.stdout[-1500:]
    # One rank on its own machine: its own steal time, a number at or above zero.
    train("one", "--steps", "2")
    one = timing("one")[0]
    assert np.all((one["rank_steal_s"] >= 0) | np.isnan(one["rank_steal_s"])), one["rank_steal_s"]
    print(f"steal_frac {steps['steal_frac']}; the note: {note.group(0)}")


@case
def resume_continues_a_one_rank_table_of_the_older_layout():
    """lctrain before the layout was fixed wrote a one-rank run's per-rank columns as
    [steps]; --resume auto continues such a table and writes it in today's layout."""
    fixture()
    p = run(*TRAIN, "--run-dir", "r", "--steps", "6", "--checkpoint-every", "3", "--stop-at", "3")
    assert p.returncode == 85, p.stdout + p.stderr
    old = {}
    with h5py.File("r/timing.h5", "r+") as f:  # rewrite the per-rank columns as the old binary did
        mfu_before = f["steps"]["mfu"][:]
        for name in RANK_COLUMNS:
            d = f["steps"][name]
            attrs, values = dict(d.attrs), d[:].reshape(-1)
            del f["steps"][name]
            f["steps"].create_dataset(name, data=values).attrs.update(attrs)
            old[name] = values
    ok(*TRAIN, "--run-dir", "r", "--steps", "6", "--checkpoint-every", "3", "--resume", "auto")
    assert_layout("r", 6, 1)
    steps = timing("r")[0]
    assert list(steps["restart"]) == [0, 0, 0, 1, 1, 1], steps["restart"]
    for name in RANK_COLUMNS:
        assert np.array_equal(steps[name][:3, 0], old[name]), name  # the earlier rows kept
    # the peak probed again at the run's end re-bases this run's MFU only
    peak = timing("r")[1]["peak_gflops"]
    assert np.array_equal(steps["mfu"][:3], mfu_before), (steps["mfu"], mfu_before)
    assert np.allclose(steps["mfu"][3:] * peak, steps["gflops"][3:]), (steps["mfu"], steps["gflops"], peak)
    print("a [steps] table of the older layout continued as [steps, 1]")


@case
def resume_continues_a_table_from_before_the_peer_wait_columns():
    """A two-rank table without peer_wait_frac and rank_peer_wait_s (removed here, as lctrain
    wrote it before exposed communication was split), nor the steal columns, continues with
    them: NaN on its earlier rows, the resumed steps' values after."""
    fixture()
    p = run("--oversubscribe", *TRAIN, "--run-dir", "r", "--cp", "2", "--steps", "4", "--checkpoint-every", "2",
            "--stop-at", "2", ranks=2)
    assert p.returncode == 85, p.stdout + p.stderr
    with h5py.File("r/timing.h5", "a") as f:
        for c in ("peer_wait_frac", "rank_peer_wait_s", "steal_frac", "rank_steal_s"):
            del f[f"steps/{c}"]
            f["steps"].attrs["columns"] = f["steps"].attrs["columns"].replace(f" {c}", "")
    train("r", "--steps", "4", "--checkpoint-every", "2", "--resume", "auto", ranks=2)
    assert_layout("r", 4, 2)
    steps = timing("r")[0]
    for c in ("peer_wait_frac", "rank_peer_wait_s", "steal_frac", "rank_steal_s"):
        v = steps[c].reshape(4, -1)
        assert np.isnan(v[:2]).all() and np.isfinite(v[2:]).all() and (v[2:] >= 0).all(), (c, v)
    print("continued with", steps["peer_wait_frac"])


@case
def cp_sweep_runs_each_layout_and_cp_table_splits_the_waits_where_known():
    """bench/cp_sweep.sh (bash and mpirun only, for the packed tree of a bigger machine) runs
    every configuration and packs the tables; bench/cp_table.py reads the pack: a row each,
    the peer/transfer split for the shm ring and "-" over MPI. A bad configuration stops it
    before any run."""
    fixture()
    sweep, table = os.path.join(ROOT, "bench", "cp_sweep.sh"), os.path.join(ROOT, "bench", "cp_table.py")
    # rank 1 slower from step 1 on, so that the shm ring surely has waits for a peer to show
    _, env = cc.command(env={"LCTRAIN": cc.LCTRAIN, "LCT_INJECT_FAULT": "slowring:1:1"})
    p = subprocess.run(["bash", sweep, "sw", "tiny", "600", "1x2 2x1:ring:shm 2x1:ring:mpi", "3"],
                       capture_output=True, text=True, env=env, timeout=240)
    assert p.returncode == 0 and "wrote sw/runs.tar" in p.stdout, p.stdout + p.stderr
    p = subprocess.run(["/usr/bin/python3", table, "sw/runs.tar"], capture_output=True, text=True, timeout=60)
    print(p.stdout)
    rows = {l.split("|")[2].strip(): [c.strip() for c in l.split("|")[1:-1]] for l in p.stdout.splitlines()[2:]}
    assert p.returncode == 0 and sorted(rows) == ["1x2", "2x1:ring:mpi", "2x1:ring:shm"], p.stdout + p.stderr
    assert rows["1x2"][3] == "1.00" and rows["1x2"][5] == "-", rows
    shm, mpi = rows["2x1:ring:shm"], rows["2x1:ring:mpi"]
    assert shm[5].endswith("%") and shm[6].endswith("%") and shm[7].endswith("%"), shm
    assert mpi[5].endswith("%") and mpi[6] == "-" and mpi[7] == "-", mpi
    assert float(shm[6].rstrip("%")) > 0.5 * float(shm[5].rstrip("%")), shm  # mostly rank 1's lateness
    p = subprocess.run(["/usr/bin/python3", table, "missing.tar"], capture_output=True, text=True, timeout=60)
    missing = "cp_table: no such file or folder: missing.tar (give a cp_sweep.sh OUTDIR or its runs.tar)"
    assert p.returncode == 1 and p.stderr.strip() == missing, p.stderr
    p = subprocess.run(["bash", sweep, "bad", "tiny", "600", "1x2 2x1:rign"], capture_output=True, text=True, env=env)
    assert p.returncode == 2 and "'2x1:rign' is not" in p.stderr and not os.path.exists("bad"), p.stderr


@case
def plan_sweep_trains_the_plans_top_layouts_and_plan_table_compares_them():
    """bench/plan_sweep.sh (bash and mpirun only) plans the tiny preset on this machine, trains
    its top 2 layouts with the plan's own flags and packs the runs; bench/plan_table.py reads
    the pack: a row per layout with a measured step and peak memory beside the prediction."""
    sweep, table = os.path.join(ROOT, "bench", "plan_sweep.sh"), os.path.join(ROOT, "bench", "plan_table.py")
    _, env = cc.command(env={"LCTRAIN": cc.LCTRAIN})
    p = subprocess.run(["bash", sweep, "ps", "tiny", "256", "2", "2", "3", "fp32"], capture_output=True, text=True,
                       env=env, timeout=300)
    assert p.returncode == 0 and "packed ps/runs.tar" in p.stdout and "failed" not in p.stdout, p.stdout + p.stderr
    p = subprocess.run(["/usr/bin/python3", table, "ps/runs.tar"], capture_output=True, text=True, timeout=60)
    print(p.stdout)
    rows = [[c.strip() for c in l.split("|")[1:-1]] for l in p.stdout.splitlines() if l.startswith("| 1") or l.startswith("| 2")]
    assert p.returncode == 0 and [r[0] for r in rows] == ["1", "2"], p.stdout + p.stderr
    for r in rows:
        assert r[2].endswith(" s") and float(r[2][:-2]) > 0, r  # a small step keeps its digits
        assert r[3].endswith(" s") and float(r[3][:-2]) > 0 and float(r[4]) > 0, r
        assert r[6].endswith(" GiB") and float(r[6][:-4]) > 0, r


def stamped(stdout, pattern):
    """The lines of stdout that are `pattern` after a timestamp, with their times."""
    out = []
    for line in stdout.splitlines():
        m = re.match(STAMP + pattern, line)
        if m:
            out.append((datetime.datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S"), m))
    return out


@case
def step_and_checkpoint_lines_carry_the_time_on_rank_0_only():
    fixture()
    before = datetime.datetime.now().replace(microsecond=0)
    for ranks in (None, 2):
        run_dir = f"r{ranks or 1}"
        p = train(run_dir, "--steps", "4", "--checkpoint-every", "2", ranks=ranks)
        after = datetime.datetime.now()
        steps = stamped(p.stdout, r"step +(\d+)/4  loss \d")
        assert [int(m.group(2)) for _, m in steps] == [1, 2, 3, 4], p.stdout  # once each: rank 0
        ckpts = stamped(p.stdout, r"checkpoint (\S+): ([\d.]+) MiB in ([\d.]+) s \(\d+ MiB/s\)$")
        assert [m.group(2) for _, m in ckpts] == [f"{run_dir}/checkpoints/step_0000000{s}.h5" for s in (2, 4)], \
            p.stdout
        for when, m in steps + ckpts:
            assert before <= when <= after, (when, before, after)
        for _, m in ckpts:
            mib = os.path.getsize(m.group(2)) / 2**20
            assert abs(float(m.group(3)) - mib) <= 0.05 + 0.01 * mib, (m.group(0), mib)
            assert 0 <= float(m.group(4)) < 60, m.group(0)
        print(steps[0][1].group(0), "|", ckpts[0][1].group(0))


@case
def eval_and_prepare_print_progress_with_rates():
    fixture()
    # eval: a line per forward pass when asked for every 1 us; none with 0 or the default 10 s.
    ok(*TRAIN, "--run-dir", "r", "--steps", "1")
    model = ["eval", "--model", "r/checkpoints/step_00000001.h5", "--data", "d16.h5", "--seq-len", "600"]
    p = ok(*model, "--progress-every", "1e-6")
    lines = stamped(p.stdout, r"eval: (\d+) / (\d+) sequences \(([\d.]+)%\), [\d.]+ sequences/s, \S+ so far, eta \S+$")
    done = [int(m.group(2)) for _, m in lines]
    assert len(lines) >= 3 and done == sorted(done) and done[-1] == int(lines[-1][1].group(3)), p.stdout
    for extra in ([], ["--progress-every", "0"]):
        assert "sequences/s" not in ok(*model, *extra).stdout
    # train: inside each step a line per layer of the forward and the backward, and the start-up
    # phases, when asked for every 1 us (rank 0 only); none with 0, nor at the default 30 s here.
    p = ok(*TRAIN, "--run-dir", "r2", "--steps", "2", "--progress-every", "1e-6", ranks=2)
    inside = stamped(p.stdout, r"step (\d)/2: (forward|backward), layer (\d) of 2 \(\S+ into the step\)$")
    want = [(str(s), d, str(l)) for s in (1, 2) for d, l in
            [("forward", 1), ("forward", 2), ("backward", 1), ("backward", 2)]]
    assert [m.groups()[1:] for _, m in inside] == want, p.stdout
    phases = [m.group(2) for _, m in stamped(p.stdout, r"start-up: (.+) \((\S+) since the start\)$")]
    assert "building the model and its parts" in p.stdout and len(phases) == 4, p.stdout
    for extra in ([], ["--progress-every", "0"]):
        assert "into the step" not in ok(*TRAIN, "--run-dir", "r3" + "".join(extra), "--steps", "1", *extra).stdout
    # prepare: generated documents; text read, then tokenized; and the rate at the end.
    p = ok("prepare", "--synthetic", "passkey", "--num-docs", "400", "--doc-length", "300", "-o", "p.h5",
           "--progress-every", "1e-6", ranks=2)
    gen = stamped(p.stdout, r"prepare: generating: (\d+) / 400 documents \([\d.]+%\), [\d.]+ documents/s")
    assert len(gen) >= 3 and int(gen[-1][1].group(2)) <= 400, p.stdout
    assert len(stamped(p.stdout, r"prepared in [\d.]+ s: \d+ documents/s, [\d.]+ M tokens/s$")) == 1, p.stdout
    lic = "/usr/share/common-licenses"
    files = sorted(os.path.join(lic, n) for n in os.listdir(lic) if os.path.isfile(os.path.join(lic, n)))
    p = ok("prepare", "-o", "lic.h5", "--separator", "\\n\\n", "--progress-every", "1e-6", *files)
    # one phase: files read in pieces and tokenized as they are read
    tok = stamped(p.stdout, r"prepare: tokenizing: [\d.]+ / [\d.]+ MB from (\d+) of (\d+) files into (\d+) "
                            r"documents, \d+ documents/s \([\d.]+%\), [\d.]+ MB/s, \S+ so far, eta \S+$")
    assert tok and int(tok[-1][1].group(2)) == int(tok[-1][1].group(3)) == len(files), p.stdout  # the last: every file
    assert int(tok[-1][1].group(4)) > 0, p.stdout
    print(lines[0][1].group(0), "|", gen[0][1].group(0), "|", tok[-1][1].group(0))


def plot(*args):
    return subprocess.run([sys.executable, PLOT, *args], capture_output=True, text=True)


@case
def plot_names_are_unique_and_a_missing_table_is_one_error_line():
    fixture()
    train("sweep/a/run", "--steps", "3")
    train("sweep/b/run", "--steps", "3", ranks=2)
    p = plot("sweep/a/run/timing.h5", "sweep/b/run/timing.h5", "--out", "png")
    assert p.returncode == 0, p.stderr
    assert sorted(os.listdir("png")) == ["a_run.png", "b_run.png", "scaling_vs_cp.png"], os.listdir("png")
    p = plot("sweep/b/run", "--out", "one")  # a run folder stands for its timing.h5
    assert p.returncode == 0 and os.listdir("one") == ["run.png"], (p.stderr, os.listdir("one"))
    for bad, needle in [("sweep/c/run/timing.h5", "'sweep/c/run/timing.h5' does not exist"),
                        ("sweep/c", "'sweep/c' does not exist"),
                        ("d16.h5", "'d16.h5' is not a training run's timing table")]:
        p = plot("sweep/a/run/timing.h5", bad, "--out", "png2")
        lines = p.stderr.splitlines()
        assert p.returncode == 1 and len(lines) == 1, (p.returncode, p.stderr)
        assert lines[0].startswith(f"plot_timing.py: error: {needle}"), lines
        assert not os.path.exists("png2"), "nothing is drawn when a table is missing"
    print("a_run.png and b_run.png; one error line each:", lines[0])


def panels(fig):
    """{title: axes} of a figure's panels that draw data."""
    return {a.get_title(): a for a in fig.axes if a.lines or a.patches}


@case
def plot_panels_have_legends_and_scale_to_the_data():
    fixture()
    train("two", "--steps", "4", ranks=2)
    # Per-rank busy time 0.987 and 1.013 of the mean: the panel must show it, not 0 to 100.
    shutil.copytree("two", "imb")
    with h5py.File("imb/timing.h5", "r+") as f:
        for name, v in [("rank_seconds", [0.987, 1.013]), ("rank_comm_s", [0, 0]),
                        ("rank_allreduce_s", [0, 0])]:
            f["steps"][name][...] = np.tile(v, (4, 1))
    # The script as a user runs it, keeping the figure it closes after saving the PNG.
    spec = importlib.util.spec_from_file_location("plot_timing", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    figures = []  # pyplot also closes "all" when it first picks its backend
    mod.plt.close = lambda fig=None: figures.append(fig) if hasattr(fig, "axes") else None
    sys.argv = [PLOT, "imb/timing.h5", "--out", "png"]
    assert mod.main() == 0 and len(figures) == 1 and os.path.exists("png/imb.png"), figures
    fig = figures[0]
    p = panels(fig)
    for title in ["learning rate", "gradient norm", "throughput", "model FLOPs utilisation"]:
        assert title in p, list(p)
    for title, a in p.items():
        assert a.get_legend() is not None, f"panel '{title}' has no legend"
    tps = [a for a in fig.axes for l in a.lines if l.get_label() == "tokens/s"]
    mfu = [a for a in fig.axes for l in a.lines if l.get_label().startswith("MFU")]
    assert len(tps) == 1 and len(mfu) == 1 and tps[0].get_position().bounds != mfu[0].get_position().bounds
    busy = next(a for t, a in p.items() if t.startswith("busy time per rank"))
    lo, hi = busy.get_ylim()
    tops = sorted(r.get_y() + r.get_height() for r in busy.patches)
    assert np.allclose(tops, [0.987, 1.013], atol=1e-3), tops
    assert lo < 0.987 and hi > 1.013 and hi - lo < 0.1, (lo, hi)  # the 1.3% shows
    print(f"busy time panel from {lo:.4f} to {hi:.4f}; panels: {sorted(p)}")


@case
def plot_shows_held_out_evaluations_when_the_table_has_them():
    fixture()
    train("e", "--steps", "4", "--eval-every", "2", "--eval-data", "d16.h5", "--eval-sequences", "2")
    spec = importlib.util.spec_from_file_location("plot_timing", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    p = panels(mod.run_figure("e/timing.h5", "e"))
    for title, a in p.items():
        assert a.get_legend() is not None, f"panel '{title}' has no legend"
    loss, rate = p["held-out loss"], p["held-out next token and passkeys"]
    held_out = next(l for l in loss.lines if l.get_label().startswith("held-out loss"))
    assert list(held_out.get_xdata()) == [2, 4], held_out.get_xdata()  # the evaluated steps only
    assert {l.get_label() for l in rate.lines} == {"next token right", "passkeys retrieved exactly"}
    # A run without evaluations keeps its eight panels.
    train("plain", "--steps", "2")
    assert "held-out loss" not in panels(mod.run_figure("plain/timing.h5", "plain"))


@case
def plot_passkey_heat_map_and_one_error_line():
    """bench/plot_passkey.py draws eval's passkey table (depth x context length) as a PNG named
    after the eval file; a file without that table is one error line and exit 1, no PNG."""
    good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "6", "--doc-lengths", "300,400", "-o", "pk.h5")
    ok("eval", "--model", "m.h5", "--data", "pk.h5", "--seq-len", "400", "--out", "e.h5")
    p = subprocess.run([sys.executable, PLOT_PASSKEY, "e.h5"], capture_output=True, text=True)
    assert p.returncode == 0 and p.stdout.strip() == "wrote e-passkey.png", (p.stdout, p.stderr)
    with open("e-passkey.png", "rb") as f:
        assert f.read(8) == b"\x89PNG\r\n\x1a\n" and os.path.getsize("e-passkey.png") > 10000
    with open("texts.txt", "w") as f:
        f.write("Plain text without any passkey in it. " * 20)
    ok("prepare", "texts.txt", "-o", "text.h5")
    ok("eval", "--model", "m.h5", "--data", "text.h5", "--seq-len", "400", "--out", "no_keys.h5")
    with open("junk.h5", "w") as f:
        f.write("not HDF5")
    for bad, needle in [("missing.h5", "'missing.h5' does not exist"),
                        ("pk.h5", "'pk.h5' is not an lctrain eval file (lctrain_file = 'dataset')"),
                        ("no_keys.h5", "'no_keys.h5' holds no passkey results by depth x length"),
                        ("junk.h5", "'junk.h5' cannot be read as HDF5")]:
        p = subprocess.run([sys.executable, PLOT_PASSKEY, bad, "--out", "bad.png"], capture_output=True, text=True)
        lines = p.stderr.splitlines()
        assert p.returncode == 1 and len(lines) == 1, (bad, p.returncode, p.stderr)
        assert lines[0].startswith(f"plot_passkey.py: error: {needle}"), lines
        assert not os.path.exists("bad.png")
    print("e-passkey.png; one error line each, e.g.:", lines[0])


@case
def plot_of_a_one_rank_run_explains_its_per_rank_panels():
    """A 1-rank table has no communication or imbalance: both per-rank panels say so in text
    and draw no bars (they used to be empty axes on every default run)."""
    fixture()
    train("one", "--steps", "3")
    spec = importlib.util.spec_from_file_location("plot_timing", PLOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fig = mod.run_figure("one/timing.h5", "one")
    said = [a for a in fig.axes if any(t.get_text() == "one rank: no communication or imbalance to show"
                                       for t in a.texts)]
    assert len(said) == 2, [a.get_title() for a in fig.axes]
    assert all(not a.patches and not a.lines and a.get_title() == "per rank" for a in said)


if __name__ == "__main__":
    sys.exit(cc.main())
