#!/usr/bin/python3
"""End-to-end checks of the lctrain binary: good runs, h5py readability and every bad input.

Each case is one ctest test (`cli_cases.py --list` names them). A bad-input case asserts:
exit code 1 (2 for command-line errors), exactly one 'lctrain: error:' line that names the
problem, and that no existing file was changed or left half-written.
Run by hand: /usr/bin/python3 tests/cli/cli_cases.py --lctrain build/app/lctrain CASE
"""
import argparse
import errno
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np

LCTRAIN = None
MPIEXEC = None
MPI_FAMILY = "openmpi"  # or "mpich" (MPICH, Intel MPI, MVAPICH, Cray MPICH): the launcher's flags
CASES = {}


def case(fn):
    CASES[fn.__name__] = fn
    return fn


SKIP_CODE = 77  # ctest's SKIP_RETURN_CODE for these cases (tests/CMakeLists.txt)


class Skip(Exception):
    """Raised by a case that cannot run here (no root, no tmpfs, no fake nodes): ctest then
    reports it skipped, not passed."""


def command(*args, env=None, ranks=None):
    """The argv and environment to run lctrain with, under mpiexec when ranks is given."""
    cmd = [LCTRAIN, *map(str, args)]
    if ranks:
        # Open MPI's mpirun refuses more ranks than cores without --oversubscribe; MPICH's
        # hydra has no such flag and allows it.
        cmd = [MPIEXEC, "-n", str(ranks), *(["--oversubscribe"] if MPI_FAMILY == "openmpi" else [])] + cmd
    # The thread variables of the caller's shell would change what lctrain runs: a case sets
    # them itself when it is about them.
    e = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_PLACES", "OMP_PROC_BIND")}
    e.update(OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
    e.update(env or {})
    return cmd, e


def run(*args, env=None, ranks=None):
    cmd, e = command(*args, env=env, ranks=ranks)
    return subprocess.run(cmd, capture_output=True, text=True, env=e, timeout=120)


def ok(*args, **kw):
    p = run(*args, **kw)
    assert p.returncode == 0, f"{args} failed ({p.returncode}):\n{p.stdout}\n{p.stderr}"
    return p


def digest(path):
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def expect_error(args, *needles, code=1, ranks=None, keep=(), env=None):
    """Runs lctrain, expecting failure with one message containing every needle."""
    before = {p: digest(p) for p in keep}
    listing = sorted(os.listdir("."))
    p = run(*args, ranks=ranks, env=env)
    assert p.returncode == code, f"exit {p.returncode}, wanted {code}\nstdout:{p.stdout}\nstderr:{p.stderr}"
    errors = [l for l in p.stderr.splitlines() if l.startswith("lctrain: error:") or l.startswith("lctrain: ")]
    assert len(errors) == 1, f"wanted one error line, got:\n{p.stderr}"
    for n in needles:
        assert n in errors[0], f"'{n}' not in: {errors[0]}"
    for path, d in before.items():
        assert digest(path) == d, f"{path} was changed"
    assert not [f for f in os.listdir(".") if ".tmp-" in f], "temporary file left behind"
    assert sorted(os.listdir(".")) == listing, f"files appeared: {set(os.listdir('.')) - set(listing)}"
    print("error as expected:", errors[0])


def good_model(name="m.h5", preset="tiny"):
    ok("init", "-o", name, "--preset", preset)
    return name


def good_dataset(name="d.h5"):
    ok("prepare", "--synthetic", "passkey", "--num-docs", "6", "--doc-length", "300", "-o", name)
    return name


def edit(path, fn):
    with h5py.File(path, "r+") as f:
        fn(f)


def flip_bytes_in(path, dataset):
    """Corrupts the stored bytes of one dataset's first chunk, leaving metadata intact."""
    with h5py.File(path, "r") as f:
        offset = f[dataset].id.get_chunk_info(0).byte_offset
    with open(path, "r+b") as f:
        f.seek(offset + 16)
        b = bytearray(f.read(8))
        f.seek(offset + 16)
        f.write(bytes(x ^ 0x5A for x in b))


# --- good runs ---------------------------------------------------------------------------

@case
def h5py_reads_model_and_dataset():
    good_model("m.h5", "30m")
    good_dataset()
    with h5py.File("m.h5", "r") as f:
        a = f.attrs
        for k in ["vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                  "num_attention_heads", "num_key_value_heads", "rope_theta", "rms_norm_eps",
                  "max_position_embeddings", "tie_word_embeddings", "format_version"]:
            assert k in a, k
        assert a["hidden_size"] == 512 and a["num_hidden_layers"] == 8 and a["intermediate_size"] == 1408
        C, H, KV = 512, a["num_attention_heads"], a["num_key_value_heads"]
        D = C // H
        assert f["model.embed_tokens.weight"].shape == (a["vocab_size"], C)
        for l in range(8):
            p = f"model.layers.{l}."
            assert f[p + "self_attn.q_proj.weight"].shape == (H * D, C)
            assert f[p + "self_attn.k_proj.weight"].shape == (KV * D, C)
            assert f[p + "self_attn.v_proj.weight"].shape == (KV * D, C)
            assert f[p + "self_attn.o_proj.weight"].shape == (C, H * D)
            assert f[p + "mlp.gate_proj.weight"].shape == (1408, C)
            assert f[p + "mlp.up_proj.weight"].shape == (1408, C)
            assert f[p + "mlp.down_proj.weight"].shape == (C, 1408)
            assert f[p + "input_layernorm.weight"].dtype == np.float32
            assert np.all(f[p + "post_attention_layernorm.weight"][:] == 1)
        assert f["model.norm.weight"].shape == (C,)
        assert f["lm_head.weight"].shape == (a["vocab_size"], C)
        w = f["model.layers.3.mlp.up_proj.weight"][:]
        assert abs(w.std() - 0.02) < 0.001, w.std()
        n = sum(f[k].size for k in f.keys() if k.endswith(".weight"))
        print(f"30m preset: {n} parameters")
        prov = f["provenance"].attrs
        for k in ["software", "version", "git_revision", "date", "host", "command_line"]:
            assert k in prov, k
        assert "init -o m.h5" in prov["command_line"]
        assert f["provenance/config"].attrs["init.preset"] == "30m"
    with h5py.File("d.h5", "r") as f:
        # the smallest unsigned type for 259 ids, chunked and compressed
        t = f["tokens"]
        assert t.ndim == 1 and t.dtype == np.uint16, t.dtype
        assert t.compression == "gzip" and t.shuffle and t.fletcher32 and t.chunks == (32768,), t.chunks
        assert f.attrs["format_version"] == 2
        off = f["doc_offsets"][:]
        assert off[0] == 0 and off[-1] == f["tokens"].shape[0] and len(off) == 7
        assert f.attrs["vocab_size"] == 259 and f.attrs["tokenizer"] == "byte"
        assert "passkey/answer_offset" in f and "provenance" in f


@case
def prepare_license_texts_round_trip():
    lic = "/usr/share/common-licenses"
    files = sorted(os.path.join(lic, n) for n in os.listdir(lic)
                   if os.path.isfile(os.path.join(lic, n)))
    assert len(files) >= 5, files
    p = ok("prepare", "-o", "lic.h5", "--seq-len", "8192", *files)
    assert "tokens per document: mean" in p.stdout and "efficiency" in p.stdout, p.stdout
    with h5py.File("lic.h5", "r") as f:
        tok, off = f["tokens"][:], f["doc_offsets"][:]
        assert len(off) == len(files) + 1
        for i, path in enumerate(files):
            doc = tok[off[i]:off[i + 1]]
            assert doc[0] == 256 and doc[-1] == 257
            with open(path, "rb") as src:
                assert bytes(doc[1:-1].astype(np.uint8)) == src.read(), path
    ok("inspect", "lic.h5", "--seq-len", "4096")


@case
def prepare_splits_on_separator():
    with open("docs.txt", "w") as f:
        f.write("first doc\n---\nsecond doc\n---\n\n---\nthird")
    p = ok("prepare", "-o", "s.h5", "--separator", "\\n---\\n", "docs.txt")
    with h5py.File("s.h5", "r") as f:
        assert f.attrs["n_documents"] == 3, f.attrs["n_documents"]


def memory_cgroup_v1(limit_bytes):
    """A child of this process's v1 memory cgroup with `limit_bytes`, or None (not root,
    cgroup v2 only, or not writable)."""
    mine = [l.split(":", 2)[2].strip() for l in open("/proc/self/cgroup") if ":memory:" in l]
    base = "/sys/fs/cgroup/memory"
    if not mine or not os.path.isdir(base):
        return None
    path = f"{base}{mine[0].rstrip('/')}/lct_test_{os.getpid()}"
    try:
        os.makedirs(path)
        with open(f"{path}/memory.limit_in_bytes", "w") as f:
            f.write(str(limit_bytes))
    except OSError:
        return None
    return path


def remove_cgroup(path):
    """rmdir a v1 cgroup once its last task has left. Launcher daemons of the run can linger
    a moment after it returns (rmdir answers EBUSY then): move any that remain to the parent
    and retry for up to 10 s; the test's result does not depend on it."""
    for _ in range(100):
        try:
            os.rmdir(path)
            return
        except OSError as e:
            if e.errno != errno.EBUSY:
                raise
        for pid in open(f"{path}/cgroup.procs").read().split():
            try:
                with open(f"{os.path.dirname(path)}/cgroup.procs", "w") as f:
                    f.write(pid)
            except OSError:
                pass  # exited meanwhile
        time.sleep(0.1)
    print(f"note: could not remove the test cgroup {path}: {open(f'{path}/cgroup.procs').read()!r} in it")


@case
def prepare_streams_an_input_larger_than_its_memory_cap():
    """200 MB of text (5,000 documents between blank lines) prepared inside a 128 MiB memory
    cgroup (v1, root; skipped otherwise): read in pieces, encoded a batch at a time and
    appended, where holding the input and its int32 ids would need a gigabyte. The peak
    resident memory stays under the cap and the ids are the text's bytes."""
    import resource
    doc = (b"The quick brown fox jumps over the lazy dog. " * 890)[:40000] + b"\n"
    with open("big.txt", "wb") as f:
        for i in range(5000):
            f.write(b"%06d " % i + doc + b"\n")
    size = os.path.getsize("big.txt")
    cap = 128 << 20
    assert size > cap * 1.4, size
    cmd, env = command("prepare", "-o", "big.h5", "--separator", "\\n\\n", "--progress-every", "1", "big.txt")
    cg = memory_cgroup_v1(cap)
    if cg:
        cmd = ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *cmd]
    else:
        print("SKIP (the cgroup): no writable v1 memory cgroup; only the peak resident memory is checked")
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=300)
        assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
        if cg:
            with open(f"{cg}/memory.failcnt") as f:
                print("cgroup: the limit was reached", f.read().strip(), "times (page cache reclaimed)")
    finally:
        if cg:
            remove_cgroup(cg)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024
    print(f"input {size / 2**20:.0f} MiB, peak resident memory {peak / 2**20:.0f} MiB, cap {cap >> 20} MiB")
    assert peak < cap, peak
    lines = re.findall(r"prepare: tokenizing: [\d.]+ / [\d.]+ MB from 1 of 1 files into (\d+) documents, "
                       r"(\d+) documents/s \([\d.]+%\), [\d.]+ MB/s, \S+ so far, eta \S+$", p.stdout, re.M)
    assert lines, p.stdout
    with h5py.File("big.h5", "r") as f:
        off, t = f["doc_offsets"][:], f["tokens"]
        # each document: its bytes less the blank line, plus BOS and EOS: as many ids as input bytes
        assert len(off) == 5001 and off[-1] == size, (len(off), off[-1], size)
        for d in (0, 2345, 4999):
            ids = t[off[d]:off[d + 1]]
            assert ids[0] == 256 and ids[-1] == 257
            assert bytes(ids[1:-1].astype(np.uint8)) == b"%06d " % d + doc[:-1], d


def peak_rss_of(*args):
    """Runs lctrain in a child of its own and returns its peak resident memory in bytes."""
    cmd, env = command(*args)
    probe = ("import resource, subprocess, sys; p = subprocess.run(sys.argv[1:]); "
             "print(p.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    p = subprocess.run([sys.executable, "-c", probe, *cmd], capture_output=True, text=True, env=env, timeout=300)
    code, kib = p.stdout.split()[-2:]
    assert code == "0", p.stdout[-3000:] + p.stderr[-2000:]
    return int(kib) * 1024


@case
def train_memory_does_not_grow_with_the_dataset():
    """Training reads only its sequences' tokens: on 100 M tokens (400 MB as int32 ids) the peak
    resident memory is within 64 MiB of the same run on 20 thousand tokens (what grows is
    the offsets and the packing: 24 bytes per document and about 100 per sequence)."""
    good_model()
    doc = (b"All work and no play makes Jack a dull boy. " * 12)[:498]
    with open("small.txt", "wb") as f:
        f.write((doc + b"\n\n") * 40)
    with open("big.txt", "wb") as f:
        f.write((doc + b"\n\n") * 200000)
    for name in ("small", "big"):
        ok("prepare", "-o", f"{name}.h5", "--separator", "\\n\\n", f"{name}.txt")
    with h5py.File("big.h5", "r") as f:
        assert f["tokens"].shape[0] == 100_000_000, f["tokens"].shape
    peaks = {name: peak_rss_of(*command_of_tiny_run(f"r_{name}", steps=2, data=f"{name}.h5"))
             for name in ("small", "big")}
    print({k: f"{v / 2**20:.0f} MiB" for k, v in peaks.items()})
    assert peaks["big"] - peaks["small"] < 64 << 20, peaks


@case
def config_file_and_precedence():
    with open("run.toml", "w") as f:
        f.write('[init]\npreset = "tiny"\nhidden_size = 128\nseed = 3\n')
    ok("init", "--config", "run.toml", "-o", "a.h5", env={"LCT_INIT_SEED": "9", "LCT_INIT_HIDDEN_SIZE": "32"})
    ok("init", "--config", "run.toml", "-o", "b.h5", "--hidden-size", "96")
    ok("init", "-o", "c.h5", env={"LCT_INIT_HIDDEN_SIZE": "32"})
    with h5py.File("a.h5") as a, h5py.File("b.h5") as b, h5py.File("c.h5") as c:
        assert a.attrs["hidden_size"] == 128       # file beats environment
        assert a["provenance/config"].attrs["init.seed"] == 3
        assert b.attrs["hidden_size"] == 96        # command line beats file
        assert c.attrs["hidden_size"] == 32        # environment beats default


@case
def version_names_every_library():
    p = ok("--version")
    for lib in ["lctrain", "git", "Open MPI", "HDF5", "OpenBLAS", "CLI11", "SentencePiece 0."]:
        assert lib in p.stdout, (lib, p.stdout)
    assert "pthread build" in p.stdout or "openmp build" in p.stdout or "sequential build" in p.stdout


@case
def two_ranks_share_cores_without_oversubscribing():
    p = ok("init", "-o", "m.h5", ranks=2, env={"OMPI_MCA_rmaps_base_oversubscribe": "0"})
    assert p.stdout.count("lctrain 0.1") == 1, "only rank 0 prints"
    assert "2 ranks in all" in p.stdout, p.stdout


@case
def omp_places_in_the_environment_keep_every_cpu_of_the_rank():
    # libgomp pins the initial thread to the first place when OMP_PLACES/OMP_PROC_BIND are
    # set (the Slurm scripts set them): the rank must still see, and use, all of its CPUs.
    good_model()
    good_dataset()
    cpus = sorted(os.sched_getaffinity(0))
    env = {"OMP_PLACES": "cores", "OMP_PROC_BIND": "close"}
    p = ok("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "256",
           "--dry-run", env=env)
    want = f"{cpus[0]}-{cpus[-1]}" if len(cpus) > 1 and cpus == list(range(cpus[0], cpus[-1] + 1)) else None
    line = next(l for l in p.stdout.splitlines() if "rank cpuset" in l)
    if want:
        assert f"rank cpuset {want} " in line, line
    threads = len(cpus)
    assert f"; {threads} OpenMP thread" in line and "bound by OMP_PROC_BIND" in line, line


@case
def omp_num_threads_is_honoured_and_threads_overrides_it():
    good_model()
    good_dataset()
    train = ["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "256", "--dry-run"]
    line = lambda p: next(l for l in p.stdout.splitlines() if "rank cpuset" in l)
    assert "; 1 OpenMP thread," in line(ok(*train, env={"OMP_NUM_THREADS": "1"}))
    if len(os.sched_getaffinity(0)) >= 2:
        assert "; 2 OpenMP threads," in line(ok("--threads", "2", *train, env={"OMP_NUM_THREADS": "1"}))
    expect_error(train, "OMP_NUM_THREADS='four'", env={"OMP_NUM_THREADS": "four"})
    expect_error(train, "(OMP_NUM_THREADS)", "oversubscribes", env={"OMP_NUM_THREADS": "999"})


def command_of_tiny_run(run_dir, *extra, steps=6, data="d.h5", model="m.h5"):
    return ("train", "--model", model, "--data", data, "--run-dir", run_dir, "--seq-len", "600",
            "--steps", str(steps), "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "64",
            "--block-k", "48", *extra)


def tiny_run(run_dir, *extra, steps=6, data="d.h5", model="m.h5"):
    return ok(*command_of_tiny_run(run_dir, *extra, steps=steps, data=data, model=model))


# The timing table's phase columns: together a step's seconds.
PHASE_COLUMNS = ["attn_fwd_s", "attn_bwd_s", "gemm_s", "other_s", "optimizer_s", "io_s", "comm_s", "allreduce_s",
                 "offload_s"]


def timing(run_dir):
    with h5py.File(f"{run_dir}/timing.h5", "r") as f:
        return {k: f["steps"][k][:] for k in f["steps"]}, dict(f.attrs)


@case
def train_loss_falls_and_outputs_are_readable():
    good_model()
    good_dataset()
    p = tiny_run("run", "--checkpoint-every", "5", "--keep-checkpoints", "2", steps=15)
    assert "verification:" in p.stdout and "PASSED" in p.stdout, p.stdout
    assert "figure of merit:" in p.stdout and "memory estimate" in p.stdout
    steps, attrs = timing("run")
    assert list(steps["step"]) == list(range(1, 16))
    assert steps["loss"][-1] < steps["loss"][0] - 0.5, steps["loss"]
    for col in ["lr", "grad_norm", "tokens_per_s", "mfu", "attn_fwd_s", "attn_bwd_s", "gemm_s",
                "other_s", "optimizer_s", "io_s", "peak_rss_mib"]:
        assert col in steps, col
    assert np.all(steps["attn_fwd_s"] > 0) and np.all(steps["gemm_s"] > 0)
    parts = sum(steps[c] for c in PHASE_COLUMNS)
    assert np.allclose(parts, steps["seconds"], rtol=1e-6), (parts, steps["seconds"])
    # tokens/s and GFLOP/s are of the step without its checkpoint write (steps 5, 10, 15)
    assert list(np.nonzero(steps["io_s"] > 0)[0] + 1) == [5, 10, 15], steps["io_s"]
    train_s = steps["seconds"] - steps["io_s"]
    assert np.allclose(steps["tokens_per_s"], steps["tokens"] / train_s, rtol=1e-6), (steps["tokens_per_s"], train_s)
    gflops = steps["rank_work_flop"].mean(axis=1) / train_s / 1e9
    assert np.allclose(steps["gflops"], gflops, rtol=1e-5), (steps["gflops"], gflops)
    assert attrs["verification"] == "PASSED" and attrs["figure_of_merit_tokens_per_s"] > 0
    # MFU is against the multiply-add peak measured on the run's own threads
    assert "measured" in attrs["peak_how"] and attrs["peak_gflops"] > 0, attrs
    assert np.allclose(steps["mfu"] * attrs["peak_gflops"], steps["gflops"]), (steps["mfu"], steps["gflops"])
    assert "peak for MFU:" in p.stdout and "cpu:" in p.stdout and "gemm: oneDNN" in p.stdout
    # probed again after the steps: the table is against the higher reading
    before = float(re.search(r"^peak for MFU: ([\d.]+) GFLOP/s", p.stdout, re.M).group(1))
    after = float(re.search(r"^peak, the higher of the probes before and after: fp32 ([\d.]+) GFLOP/s",
                            p.stdout, re.M).group(1))
    assert after >= before and abs(attrs["peak_gflops"] - after) < 0.06, (before, after, attrs["peak_gflops"])
    ckpts = sorted(os.listdir("run/checkpoints"))
    assert ckpts == ["latest", "run_id", "step_00000010.h5", "step_00000015.h5"], ckpts
    assert open("run/checkpoints/latest").read().strip() == "step_00000015.h5"
    with h5py.File("run/checkpoints/step_00000015.h5", "r") as f:
        assert f.attrs["lctrain_file"] == "checkpoint"
        assert f["train_state"].attrs["step"] == 15
        assert "optimizer/exp_avg/model.layers.1.mlp.up_proj.weight" in f
        assert f["model.layers.1.self_attn.q_proj.weight"].shape == (64, 64)
    # A checkpoint is accepted wherever a model file is.
    p = ok("eval", "--model", "run/checkpoints/step_00000015.h5", "--data", "d.h5", "--seq-len", "600",
           "--out", "eval.h5")
    assert "passkey retrieval" in p.stdout and "mean loss" in p.stdout, p.stdout
    with h5py.File("eval.h5", "r") as f:
        assert abs(f.attrs["mean_loss"] - steps["loss"][-1]) < 0.5
        assert f["passkey/asked"][:].sum() == 6
    # inspect shows the results as eval printed them, then the figures and the provenance.
    shown = ok("inspect", "eval.h5").stdout
    printed = p.stdout[p.stdout.index("eval: "):p.stdout.index("wrote eval.h5")]
    assert printed.strip() and printed in shown, (printed, shown)
    assert shown.index("passkey retrieval") < shown.index("attributes:") < shown.index("provenance:"), shown
    p = ok("inspect", "run/timing.h5")
    assert "median tokens/s" in p.stdout and "time split" in p.stdout, p.stdout
    ok("train", "--model", "run/checkpoints/step_00000015.h5", "--data", "d.h5", "--run-dir", "run2",
       "--seq-len", "600", "--steps", "1")


def assert_deterministic_and_policies_agree(prefix, *extra):
    """Two runs with no checkpointing, one with full and one with attention checkpointing:
    recomputation reruns the same kernels, so the training is bitwise the same."""
    runs = {}
    for name, policy in [("a", "none"), ("b", "none"), ("c", "full"), ("d", "attention")]:
        tiny_run(prefix + name, "--checkpointing", policy, "--batch-size", "2", "--grad-accum", "2", *extra,
                 steps=4)
        runs[name] = timing(prefix + name)[0]["loss"]
        with h5py.File(f"{prefix}{name}/checkpoints/step_00000004.h5", "r") as f:
            runs[name + "w"] = f["model.layers.0.mlp.down_proj.weight"][:]
    print(prefix, {k: v for k, v in runs.items() if not k.endswith("w")})
    for other in "bcd":
        assert np.array_equal(runs["a"], runs[other]), (other, runs["a"], runs[other])
        assert np.array_equal(runs["aw"], runs[other + "w"]), other
    return runs["a"]


@case
def mfu_above_100_percent_is_explained():
    """A peak below what the steps reach (here given too low) cannot pass for a real MFU."""
    good_model()
    good_dataset()
    p = tiny_run("run", "--peak-gflops", "0.001", steps=3)
    assert "note: MFU above 100%: the --peak-gflops given is below what the steps reached" in p.stdout, p.stdout
    p = tiny_run("run2", steps=3)
    assert "MFU above 100%" not in p.stdout, p.stdout


@case
def train_is_deterministic_and_checkpointing_policies_agree():
    good_model()
    good_dataset()
    assert_deterministic_and_policies_agree("")


@case
def train_in_bf16_is_deterministic_policies_agree_and_it_follows_fp32():
    good_model()
    good_dataset()
    bf16 = assert_deterministic_and_policies_agree("bf16_", "--precision", "bf16")
    fp32 = assert_deterministic_and_policies_agree("fp32_")
    rel = np.max(np.abs(bf16 - fp32) / fp32)
    print(f"bf16 losses {bf16}, fp32 {fp32}, max rel diff {rel:.2e}")
    assert rel < 2e-2, (bf16, fp32)
    # MFU against that precision's peak (bf16 without bf16 hardware runs on the fp32 units)
    for prefix, allowed in [("bf16_", ("bf16, ", "fp32 units")), ("fp32_", ("fp32, ",))]:
        with h5py.File(f"{prefix}a/timing.h5", "r") as f:
            assert f.attrs["peak_how"].startswith(allowed), (prefix, f.attrs["peak_how"])


@case
def every_kernel_path_and_gemm_library_trains_to_the_same_losses():
    """The paths this CPU runs (an AVX-512 machine covers avx2 and generic too) and OpenBLAS
    give the same losses as the default run, to rounding; a path the CPU lacks is refused."""
    good_model()
    good_dataset()
    tiny_run("ref")
    ref = timing("ref")[0]["loss"]
    ran = []
    for flags in (["--isa", "avx512"], ["--isa", "avx2"], ["--isa", "generic"], ["--gemm", "openblas"]):
        p = run(*flags, "train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "run_" + flags[1],
                "--seq-len", "600", "--steps", "6", "--lr", "3e-3", "--warmup-steps", "2",
                "--block-q", "64", "--block-k", "48")
        if p.returncode != 0:
            assert "cannot run it" in p.stderr and p.stderr.count("\n") == 1, p.stderr
            continue
        assert flags[0] != "--isa" or f"kernels: {flags[1]}" in p.stdout, p.stdout
        loss = timing("run_" + flags[1])[0]["loss"]
        assert np.allclose(loss, ref, rtol=2e-5, atol=0), (flags, loss, ref)
        ran.append(flags[1])
    assert "generic" in ran and "openblas" in ran, ran


@case
def attention_kernel_onednn_trains_the_fused_losses_and_a_resume_keeps_it():
    """--attention-kernel onednn (every product of a tile a oneDNN matmul) trains the fused
    kernel's losses to rounding, in fp32 and bf16; the path is recorded in every checkpoint, and
    a resume under auto takes it again (steps 4-6 bit for bit as the straight run), where a
    fresh fp32 auto run times both, says so, and takes the fused kernel (oneDNN's path only in
    bf16 on AMX)."""
    good_model()
    good_dataset()
    for precision in ("fp32", "bf16"):
        paths = {}
        for kernel in ("fused", "onednn"):
            p = tiny_run(f"{kernel}_{precision}", "--attention-kernel", kernel, "--precision", precision)
            assert f"attention kernel: {kernel} (--attention-kernel)" in p.stdout, p.stdout
            paths[kernel] = timing(f"{kernel}_{precision}")[0]["loss"]
        print(precision, "losses fused", paths["fused"], "onednn", paths["onednn"])
        assert np.allclose(paths["onednn"], paths["fused"], rtol=2e-5 if precision == "fp32" else 2e-3, atol=0)
    with h5py.File("onednn_fp32/checkpoints/step_00000006.h5", "r") as f:
        assert f["train_state"].attrs["attention_kernel"] == "onednn", dict(f["train_state"].attrs)
    # The ring runs the same path on each of its steps: cp = 2 trains one rank's losses.
    ok("--oversubscribe", *command_of_tiny_run("cp_onednn", "--cp", "2", "--attention-kernel", "onednn"), ranks=2)
    ring = timing("cp_onednn")[0]["loss"]
    assert np.allclose(ring, timing("fused_fp32")[0]["loss"], rtol=2e-5, atol=0), ring
    first = run(*command_of_tiny_run("split", "--attention-kernel", "onednn", "--checkpoint-every", "3",
                                     "--stop-at", "3"))
    assert first.returncode == 85, (first.returncode, first.stdout, first.stderr)
    p = tiny_run("split", "--checkpoint-every", "3", "--resume", "auto")
    assert "attention kernel: onednn (--attention-kernel auto: the checkpoint's" in p.stdout, p.stdout
    assert np.array_equal(timing("split")[0]["loss"][-3:], timing("onednn_fp32")[0]["loss"][3:])
    p = tiny_run("split", "--attention-kernel", "fused", "--resume", "auto", steps=7)
    assert "the checkpoint it resumes from was trained with onednn" in p.stdout, p.stdout
    p = tiny_run("auto")
    m = re.search(r"attention kernel: (fused|onednn) \(--attention-kernel auto: a forward and backward of 600 "
                  r"tokens, 4 heads, took ([\d.]+) ms fused and ([\d.]+) ms through oneDNN on rank 0's \d+ "
                  r"threads; oneDNN's path is taken only in bf16 on AMX\)", p.stdout)
    assert m, p.stdout  # fp32: the fused kernel, whatever the timings (no matrix engine for oneDNN)
    faster = m.group(1)
    assert faster == "fused", m.groups()
    with h5py.File("auto/checkpoints/step_00000006.h5", "r") as f:
        assert f["train_state"].attrs["attention_kernel"] == faster


@case
def bf16_without_bf16_products_warns_and_still_trains():
    """On the avx2 path (or a CPU without AVX512_BF16/AMX) bf16 is widened to fp32: one warning
    line, the same training to bf16's precision."""
    good_model()
    good_dataset()
    tiny_run("f32")
    p = run("--isa", "avx2", "train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "b16", "--seq-len", "600",
            "--steps", "6", "--lr", "3e-3", "--warmup-steps", "2", "--block-q", "64", "--block-k", "48",
            "--precision", "bf16")
    assert p.returncode == 0, p.stderr
    assert p.stdout.count("warning: --precision bf16 without bf16 products here") == 1, p.stdout
    assert "not faster" in p.stdout
    ref, got = timing("f32")[0]["loss"], timing("b16")[0]["loss"]
    assert np.max(np.abs(got - ref) / ref) < 2e-2, (got, ref)
    assert timing("b16")[1]["peak_how"].startswith("fp32 units"), timing("b16")[1]["peak_how"]


@case
def bench_attention_writes_its_table():
    p = ok("bench", "attention", "--seq-len", "300,512", "--heads", "4", "--kv-heads", "2",
           "--repeats", "1", "--out", "b.h5")
    assert "%peak" in p.stdout and "peak: fp32" in p.stdout, p.stdout
    with h5py.File("b.h5", "r") as f:
        assert f.attrs["lctrain_file"] == "bench"
        assert list(f["steps/seq_len"][:]) == [300, 512]
        assert np.all(f["steps/fwd_gflops"][:] > 0) and np.all(f["steps/gemm_gflops"][:] > 0)
        peak = f.attrs["peak_gflops"]
        # the fraction of the measured peak is the ratio of the two figures it is made of
        assert peak > 0 and np.allclose(f["steps/fwd_peak_frac"][:] * peak, f["steps/fwd_gflops"][:])
    # probed before and after the timings; the table is against the higher reading of each
    before = float(re.search(r"^peak: fp32 ([\d.]+) GFLOP/s", p.stdout, re.M).group(1))
    after = float(re.search(r"^peak, the higher of the probes before and after: fp32 ([\d.]+) GFLOP/s",
                            p.stdout, re.M).group(1))
    assert after >= before and abs(peak - after) < 0.06, (before, after, peak)
    p = ok("bench", "attention", "--seq-len", "256", "--heads", "4", "--kv-heads", "2", "--repeats", "1",
           "--precision", "bf16", "--out", "b16.h5")
    assert "bf16 inputs" in p.stdout, p.stdout
    with h5py.File("b16.h5", "r") as f:
        assert f.attrs["precision"] == "bf16" and f.attrs["peak_how"].startswith(("bf16, ", "fp32 units"))


@case
def bench_ring_times_the_permute_and_the_step_it_hides_behind():
    p = ok("bench", "ring", "--sizes", "4,64", "--seq-len", "512", "--repeats", "2", "--out", "ring.h5",
           ranks=2)
    assert "ring permute between 2 ranks" in p.stdout and "shm: shm to rank 1, shm from rank 1" in p.stdout
    with h5py.File("ring.h5", "r") as f:  # each size over both transports
        assert list(f["steps/bytes"][:]) == [4096, 4096, 65536, 65536] and np.all(f["steps/seconds"][:] > 0)
        assert list(f["steps/shm"][:]) == [0, 1, 0, 1]
    with h5py.File("ring-steps.h5", "r") as f:
        assert list(f["steps/seq_len"][:]) == [512] and f["steps/block_bytes"][0] > 0
        assert f["steps/attn_step_s"][0] > 0 and f["steps/transfer_s"][0] > 0
        assert f["steps/transfer_shm_s"][0] > 0


@case
def bench_gemm_measures_both_libraries_on_the_training_products():
    p = ok("bench", "gemm", "--preset", "tiny", "--seq-len", "200", "--repeats", "1", "--out", "g.h5")
    assert "lm_head" in p.stdout and "dweight" in p.stdout, p.stdout
    with h5py.File("g.h5", "r") as f:
        assert len(f["steps/M"][:]) == 6 * 3  # six kinds of linear layer, three products each
        assert np.all(f["steps/onednn_gflops"][:] > 0) and np.all(f["steps/openblas_gflops"][:] > 0)
        assert f.attrs["precision"] == "fp32" and f.attrs["peak_how"].startswith("fp32, ")
    # bf16 operands, against the bf16 peak (the fp32 units' where the CPU has no bf16 products)
    p = ok("bench", "gemm", "--preset", "tiny", "--seq-len", "200", "--repeats", "1", "--precision", "bf16",
           "--out", "g16.h5")
    assert "bf16 operands, fp32 results" in p.stdout, p.stdout
    with h5py.File("g16.h5", "r") as f:
        assert len(f["steps/M"][:]) == 6 * 3 and np.all(f["steps/onednn_gflops"][:] > 0)
        assert f.attrs["precision"] == "bf16" and f.attrs["peak_how"].startswith(("bf16, ", "fp32 units"))
        peak = f.attrs["peak_gflops"]
        assert np.allclose(f["steps/onednn_peak_frac"][:] * peak, f["steps/onednn_gflops"][:])


@case
def bench_peak_reports_every_window_against_the_best():
    p = ok("bench", "peak", "--seconds", "0.5", "--out", "peak.h5")
    rows = dict(re.findall(r"^  (best|mean|median|slowest) +([\d.]+) ", p.stdout, re.M))
    assert set(rows) == {"best", "mean", "median", "slowest"}, p.stdout
    assert float(rows["best"]) >= float(rows["median"]) >= float(rows["slowest"]) > 0, p.stdout
    assert float(rows["best"]) >= float(rows["mean"]) >= float(rows["slowest"]), p.stdout
    with h5py.File("peak.h5", "r") as f:
        g = f["steps/gflops"][:]
        assert len(g) >= 5 and np.isclose(g.max(), f.attrs["peak_gflops"], rtol=1e-3)
        assert np.isclose(g.max(), float(rows["best"]), rtol=1e-3)
        threads = [k for k in f["steps"] if k.startswith("thread")]
        assert threads and all(len(f["steps"][k]) == len(g) for k in threads)
        # all threads together finish with the slowest: never faster than the threads' sum
        total = sum(f["steps"][k][:] for k in threads)
        assert np.all(g <= total * (1 + 1e-9))
    expect_error(["bench", "peak", "--seconds", "0"], "--seconds", code=2)


@case
def model_files_without_sliding_window_are_full_causal():
    """Files written before sliding_window existed lack the attribute: they load as none."""
    good_model()
    good_dataset()
    ok("init", "-o", "old.h5", "--preset", "tiny")
    edit("old.h5", lambda f: f.attrs.__delitem__("sliding_window"))
    a = ok("eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "256")
    b = ok("eval", "--model", "old.h5", "--data", "d.h5", "--seq-len", "256")
    loss = lambda p: re.search(r"loss ([\d.]+)", p.stdout).group(1)
    assert loss(a) == loss(b), (a.stdout, b.stdout)
    expect_error(["init", "-o", "bad.h5", "--sliding-window", "-5"], "--sliding-window", code=2)  # usage


@case
def rope_scaling_attributes_from_init_and_files_without_them():
    """init --rope-scaling writes Hugging Face's rope_scaling as flat rope_scaling.* root
    attributes that eval applies; files without them (written before they existed) are plain
    RoPE; a broken value is named with its fix; a flag the chosen type does not read is refused."""
    good_model()
    good_dataset()
    ok("init", "-o", "y.h5", "--rope-scaling", "yarn", "--rope-factor", "4",
       "--rope-original-max-position-embeddings", "64", "--rope-beta-fast", "16")
    with h5py.File("y.h5", "r") as f:
        a = f.attrs
        assert a["rope_scaling.rope_type"] == "yarn" and a["rope_scaling.factor"] == 4.0, dict(a)
        assert a["rope_scaling.original_max_position_embeddings"] == 64, dict(a)
        assert a["rope_scaling.beta_fast"] == 16.0 and a["rope_scaling.truncate"], dict(a)
    ok("init", "-o", "old.h5", "--preset", "tiny")
    edit("old.h5", lambda f: [f.attrs.__delitem__(k) for k in list(f.attrs) if k.startswith("rope_scaling.")])
    loss = lambda m: re.search(r"loss ([\d.]+)", ok("eval", "--model", m, "--data", "d.h5",
                                                      "--seq-len", "256").stdout).group(1)
    plain, old, yarn = loss("m.h5"), loss("old.h5"), loss("y.h5")  # the same weights (seed 1)
    assert plain == old and yarn != plain, (plain, old, yarn)
    shutil.copy("old.h5", "bad.h5")
    edit("bad.h5", lambda f: f.attrs.__setitem__("rope_scaling.rope_type", "llama3"))
    expect_error(["inspect", "bad.h5"], "bad.h5", "rope_scaling.original_max_position_embeddings",
                 "llama3 needs it", "--rope-original-max-position-embeddings")
    expect_error(["init", "-o", "x.h5", "--rope-scaling", "linear", "--rope-factor", "2",
                  "--rope-low-freq-factor", "1"],
                 "--rope-low-freq-factor (rope_scaling.low_freq_factor)", "linear does not use it")
    expect_error(["init", "-o", "x.h5", "--rope-scaling", "ntk"], "--rope-scaling", code=2)  # usage


# --- bad input ---------------------------------------------------------------------------

@case
def bad_model_missing_file():
    expect_error(["inspect", "nothere.h5"], "'nothere.h5' does not exist")


@case
def bad_model_not_hdf5():
    with open("m.h5", "w") as f:
        f.write("not hdf5 at all\n" * 100)
    expect_error(["inspect", "m.h5"], "'m.h5' cannot be opened as HDF5")


@case
def bad_model_truncated():
    good_model()
    size = os.path.getsize("m.h5")
    with open("m.h5", "r+b") as f:
        f.truncate(size // 2)
    expect_error(["inspect", "m.h5"], "m.h5", "truncated")


@case
def bad_model_corrupt_tensor_data():
    good_model()
    flip_bytes_in("m.h5", "model.layers.1.mlp.up_proj.weight")
    expect_error(["inspect", "m.h5"], "model.layers.1.mlp.up_proj.weight", "corrupt")


@case
def bad_model_missing_tensor():
    good_model()
    edit("m.h5", lambda f: f.__delitem__("model.layers.1.self_attn.k_proj.weight"))
    expect_error(["inspect", "m.h5"], "model.layers.1.self_attn.k_proj.weight", "missing")


@case
def bad_model_wrong_shape():
    good_model()
    def fn(f):
        del f["model.layers.0.mlp.gate_proj.weight"]
        f["model.layers.0.mlp.gate_proj.weight"] = np.zeros((64, 176), np.float32)
    edit("m.h5", fn)
    expect_error(["inspect", "m.h5"], "model.layers.0.mlp.gate_proj.weight", "[64, 176]", "[176, 64]")


@case
def bad_model_wrong_dtype():
    good_model()
    def fn(f):
        del f["model.norm.weight"]
        f["model.norm.weight"] = np.ones(64, np.float64)
    edit("m.h5", fn)
    expect_error(["inspect", "m.h5"], "model.norm.weight", "float64", "float32")


@case
def bad_model_wrong_format_version():
    good_model()
    edit("m.h5", lambda f: f.attrs.__setitem__("format_version", 99))
    expect_error(["inspect", "m.h5"], "format_version 99")


@case
def bad_model_missing_config_attribute():
    good_model()
    edit("m.h5", lambda f: f.attrs.__delitem__("num_key_value_heads"))
    expect_error(["inspect", "m.h5"], "'num_key_value_heads' is missing")


@case
def bad_model_inconsistent_config():
    good_model()
    edit("m.h5", lambda f: f.attrs.__setitem__("num_key_value_heads", 3))
    expect_error(["inspect", "m.h5"], "num_attention_heads 4 is not divisible by num_key_value_heads 3")


@case
def bad_model_foreign_hdf5():
    with h5py.File("m.h5", "w") as f:
        f["x"] = np.zeros(3)
    p = ok("inspect", "m.h5")  # inspect shows any HDF5 file ...
    assert "not an lctrain file" in p.stdout
    # ... but a model reader refuses it; the dataset check exercises the same path.


@case
def bad_dataset_token_out_of_vocabulary():
    good_dataset()
    def fn(f):
        t = f["tokens"][:]
        t[123] = 300
        del f["tokens"]
        f["tokens"] = t
    edit("d.h5", fn)
    expect_error(["inspect", "d.h5"], "token id 300 at position 123", "vocabulary [0, 259)")


@case
def bad_dataset_token_out_of_vocabulary_is_found_by_the_ranks_reading_it():
    """train and eval read only their sequences' tokens: the id is checked when read, and
    every rank stops with the one message."""
    good_model()
    good_dataset()
    edit("d.h5", lambda f: f["tokens"].__setitem__(1234, 300))
    expect_error(["eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "600"],
                 "token id 300 at position 1234", "vocabulary [0, 259)")
    p = run("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600",
            "--steps", "2", "--cp", "2", ranks=2)
    assert p.returncode != 0, p.stdout
    assert "token id 300 at position 1234" in p.stdout + p.stderr, p.stdout + p.stderr


@case
def dataset_format_1_with_int32_tokens_still_reads_and_trains_alike():
    """Files of format 1 (int32 tokens, uncompressed) are read as they are; the data's
    fingerprint does not depend on the storage, so a run on either file is the same run."""
    good_model()
    good_dataset()
    shutil.copy("d.h5", "old.h5")
    def to_v1(f):
        t = f["tokens"][:].astype(np.int32)
        del f["tokens"]
        f.create_dataset("tokens", data=t, chunks=(len(t),), fletcher32=True)
        f.attrs["format_version"] = 1
    edit("old.h5", to_v1)
    a, b = ok("inspect", "d.h5").stdout, ok("inspect", "old.h5").stdout
    assert "(format_version 2," in a and "stored as   ids uint16 in chunks of 32768, compressed (deflate)" in a, a
    assert "(format_version 1," in b and "stored as   ids int32 in chunks of 1800, uncompressed" in b, b
    same = lambda out: [l for l in out.replace("old.h5", "d.h5").splitlines()
                        if "format_version" not in l and "stored as" not in l]
    assert same(a) == same(b), (a, b)
    tiny_run("new", steps=4)
    tiny_run("old", steps=4, data="old.h5")
    assert np.array_equal(timing("new")[0]["loss"], timing("old")[0]["loss"])
    # a run stopped on the old file resumes on the new one: the same data to the checkpoint
    p = run(*command_of_tiny_run("mix", "--stop-at", "2", data="old.h5"))
    assert p.returncode == 85, p.stdout + p.stderr
    p = tiny_run("mix", "--resume", "auto", steps=4)
    assert "other data" not in p.stdout, p.stdout
    assert np.array_equal(timing("new")[0]["loss"][-2:], timing("mix")[0]["loss"][-2:])


@case
def loss_on_answers_writes_a_mask_and_a_mask_of_ones_trains_bitwise_as_none():
    good_model()
    good_dataset()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "6", "--doc-length", "300", "--loss-on", "answers",
       "-o", "masked.h5")
    with h5py.File("masked.h5", "r") as f, h5py.File("d.h5", "r") as g:
        assert np.array_equal(f["tokens"][:], g["tokens"][:])
        m, off = f["loss_weights"][:], f["doc_offsets"][:]
        assert m.dtype == np.uint8 and f["loss_weights"].compression == "gzip"
        first = off[:-1] + f["passkey/answer_offset"][:]
        want = np.zeros_like(m)
        for a, n in zip(first, f["passkey/answer_length"][:]):
            want[a:a + n] = 1
        assert np.array_equal(m, want) and m.sum() == 6 * 5
        # the answer digits are the last tokens before EOS
        assert np.array_equal(first + 5, off[1:] - 1)
    p = ok("inspect", "masked.h5")
    assert "loss weights: 30 of 1794 targets weighted" in p.stdout, p.stdout
    # a mask of ones: the same numbers as no mask, bit for bit
    shutil.copy("d.h5", "ones.h5")
    edit("ones.h5", lambda f: f.create_dataset("loss_weights", data=np.ones(1800, np.uint8)))
    tiny_run("plain", steps=3)
    tiny_run("ones", steps=3, data="ones.h5")
    a, b = timing("plain")[0], timing("ones")[0]
    assert np.array_equal(a["loss"], b["loss"]) and np.array_equal(a["grad_norm"], b["grad_norm"])
    tiny_run("masked", steps=3, data="masked.h5")
    assert not np.array_equal(a["loss"], timing("masked")[0]["loss"])
    expect_error(["prepare", "--loss-on", "answers", "-o", "t.h5", "/usr/share/common-licenses/MIT"],
                 "--loss-on answers", "--synthetic passkey")


@case
def two_writers_of_one_output_started_together_one_fails():
    """Two prepares of one -o started together both pass the check at their start; the final
    step is exclusive, so one writes the file and the other fails with one line (no --force)."""
    args = ["prepare", "--synthetic", "passkey", "--num-docs", "300", "--doc-length", "4000", "-o", "same.h5"]
    procs = []
    for _ in range(2):
        cmd, e = command(*args)
        procs.append(subprocess.Popen(cmd, env=e, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [(p.wait(timeout=120), *p.communicate()) for p in procs]
    codes = sorted(rc for rc, _, _ in outs)
    assert codes == [0, 1], [(rc, err) for rc, _, err in outs]
    _, out, err = next(o for o in outs if o[0] == 1)
    errors = [l for l in err.splitlines() if l.startswith("lctrain: ")]
    assert len(errors) == 1 and "same.h5" in errors[0] and "--force" in errors[0], err
    assert "wrote" not in out, out
    assert not [f for f in os.listdir(".") if ".tmp-" in f], os.listdir(".")
    ok("inspect", "same.h5")


@case
def all_zero_loss_weights_are_refused_and_unweighted_documents_warned():
    """A dataset whose loss weights score no target trains on a loss of 0 with no gradient:
    refused before anything is written. Some documents without a weighted target: a warning."""
    good_model()
    good_dataset()
    shutil.copy("d.h5", "zeros.h5")
    edit("zeros.h5", lambda f: f.create_dataset("loss_weights", data=np.zeros(1800, np.uint8)))
    expect_error(command_of_tiny_run("z", data="zeros.h5"), "--data 'zeros.h5'", "loss weights",
                 "are zero", "--loss-on all", keep=["zeros.h5"])
    expect_error(command_of_tiny_run("z", data="zeros.h5"), "are zero", ranks=2)
    shutil.copy("d.h5", "some.h5")
    w = np.ones(1800, np.uint8)
    w[300:600] = 0  # the second document scores nothing
    edit("some.h5", lambda f: f.create_dataset("loss_weights", data=w))
    p = tiny_run("some", steps=2, data="some.h5")
    assert "warning: --data 'some.h5': 1 of 6 documents have no weighted target" in p.stdout, p.stdout


@case
def prepare_copy_writes_pairs_and_eval_measures_its_loss_alone():
    """--synthetic copy: byte documents of "S S. " pairs and no passkey answers; --loss-on
    answers masks the second copies. eval and train --eval-every measure its loss alone, and
    --until-retrieval, with no keys there to judge, is one error."""
    good_model()
    p = ok("prepare", "--synthetic", "copy", "--num-docs", "8", "--doc-length", "256", "-o", "c.h5")
    assert "(synthetic copy: 8 documents of 256 tokens, seed 1)" in p.stdout, p.stdout
    ok("prepare", "--synthetic", "copy", "--num-docs", "8", "--doc-length", "256", "--loss-on", "answers",
       "-o", "cm.h5")
    with h5py.File("c.h5", "r") as f, h5py.File("cm.h5", "r") as g:
        t, off = f["tokens"][:], f["doc_offsets"][:]
        assert list(off) == list(range(0, 8 * 256 + 1, 256)), off
        assert "passkey" not in f and "loss_weights" not in f, list(f)
        assert np.array_equal(t, g["tokens"][:])
        m = g["loss_weights"][:]
        for d in range(8):
            text = bytes(t[off[d] + 1:off[d + 1] - 1].astype(np.uint8)).decode()
            s, copy = text.split(". ")[0].split(" ")
            assert s == copy and 4 <= len(s) <= 12 and len(set(s)) == len(s), text
            first = off[d] + 2 + len(s)  # BOS, S and the space before the copy
            assert not m[off[d]:first].any() and m[first:first + len(s)].all(), m[off[d]:first + len(s)]
        assert 0.3 * len(m) < m.sum() < 0.5 * len(m), m.sum()  # the copies: 4-12 of each 11-27 bytes
    p = ok("eval", "--model", "m.h5", "--data", "c.h5", "--seq-len", "256")
    assert "loss" in p.stdout and "passkey" not in p.stdout, p.stdout
    p = tiny_run("run", "--eval-every", "2", "--eval-data", "c.h5", "--eval-sequences", "2", steps=2, data="cm.h5")
    assert re.search(r"\] eval at step 2: loss [0-9.]+, next token [0-9.]+%", p.stdout), p.stdout
    assert "passkeys" not in p.stdout, p.stdout
    expect_error(list(command_of_tiny_run("u", "--eval-every", "2", "--eval-data", "c.h5", "--until-retrieval",
                                          "0.5", steps=2, data="cm.h5")),
                 "--until-retrieval 0.5 needs passkeys", "'c.h5' has none")
    def whole_pairs(path):
        """The words of every whole pair ("S w.. S", before its ". ") in a copy file."""
        with h5py.File(path, "r") as f:
            t, off = f["tokens"][:], f["doc_offsets"][:]
        return [pair.split(" ") for d in range(len(off) - 1)
                for pair in bytes(t[off[d] + 1:off[d + 1] - 1].astype(np.uint8)).decode().split(". ")[:-1]]

    # --copy-repeats: that share of the strings digits that repeat; refused out of [0, 1] and
    # for other kinds of data.
    p = ok("prepare", "--synthetic", "copy", "--num-docs", "8", "--doc-length", "256", "--copy-repeats", "1",
           "-o", "cr.h5")
    assert "0.5 of the strings" not in p.stdout and "1 of the strings digits with repeats" in p.stdout, p.stdout
    strings = [words[0] for words in whole_pairs("cr.h5")]
    assert all(s.isdigit() for s in strings), strings
    assert sum(len(set(s)) < len(s) for s in strings) > len(strings) / 2, strings
    expect_error(["prepare", "--synthetic", "copy", "--copy-repeats", "1.5", "-o", "x.h5"],
                 "--copy-repeats: 1.5 is not in [0, 1]", code=2)  # a usage error
    expect_error(["prepare", "--synthetic", "passkey", "--copy-repeats", "0.5", "-o", "x.h5"],
                 "--copy-repeats shapes --synthetic copy's strings", "drop --copy-repeats")
    # --copy-gap-words: 0 to N words between the copies, none of whose symbols is in the string;
    # refused negative and for other kinds of data.
    p = ok("prepare", "--synthetic", "copy", "--num-docs", "8", "--doc-length", "256", "--copy-gap-words", "2",
           "-o", "cg.h5")
    assert "0 to 2 words between the copies" in p.stdout, p.stdout
    pairs = whole_pairs("cg.h5")
    assert all(w[0] == w[-1] and len(w) <= 4 and not set("".join(w[1:-1])) & set(w[0]) for w in pairs), pairs
    assert {len(w) - 2 for w in pairs} == {0, 1, 2}, pairs
    expect_error(["prepare", "--synthetic", "copy", "--copy-gap-words", "-1", "-o", "x.h5"],
                 "--copy-gap-words", code=2)
    expect_error(["prepare", "--synthetic", "recall", "--copy-gap-words", "1", "-o", "x.h5"],
                 "--copy-gap-words shapes --synthetic copy's pairs", "drop --copy-gap-words")
    # bench/probe_copy.py: one row of three accuracies per model; anything else one line, exit 1.
    probe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench", "probe_copy.py")
    p = subprocess.run(["/usr/bin/python3", probe, "--docs", "1", "m.h5"], capture_output=True, text=True)
    assert p.returncode == 0 and re.search(r"(\d+\.\d%\s+){3}m\.h5", p.stdout), p.stdout + p.stderr
    p = subprocess.run(["/usr/bin/python3", probe, "m.h5", "c.h5"], capture_output=True, text=True)
    assert p.returncode == 1 and p.stdout == "" and p.stderr.strip() == \
        "probe_copy: 'c.h5' is not an lctrain model or checkpoint (lctrain_file: dataset)", p.stdout + p.stderr


@case
def bad_dataset_float_tokens():
    good_dataset()
    def fn(f):
        t = f["tokens"][:].astype(np.float32)
        del f["tokens"]
        f["tokens"] = t
    edit("d.h5", fn)
    expect_error(["inspect", "d.h5"], "'tokens'", "float32", "integer")


@case
def bad_dataset_missing_offsets():
    good_dataset()
    edit("d.h5", lambda f: f.__delitem__("doc_offsets"))
    expect_error(["inspect", "d.h5"], "'doc_offsets'", "missing")


@case
def bad_dataset_decreasing_offsets():
    good_dataset()
    def fn(f):
        o = f["doc_offsets"][:]
        o[2], o[3] = o[3], o[2]
        del f["doc_offsets"]
        f["doc_offsets"] = o
    edit("d.h5", fn)
    expect_error(["inspect", "d.h5"], "doc_offsets decrease at document")


@case
def bad_dataset_truncated():
    good_dataset()
    with open("d.h5", "r+b") as f:
        f.truncate(os.path.getsize("d.h5") - 2000)
    expect_error(["inspect", "d.h5"], "d.h5")


@case
def bad_dataset_corrupt_tokens():
    good_dataset()
    flip_bytes_in("d.h5", "tokens")
    expect_error(["inspect", "d.h5"], "'tokens'", "corrupt")


@case
def bad_dataset_wrong_format_version():
    good_dataset()
    edit("d.h5", lambda f: f.attrs.__setitem__("format_version", 3))
    expect_error(["inspect", "d.h5"], "format_version 3")


@case
def bad_output_exists_without_force():
    good_model()
    good_dataset()
    expect_error(["init", "-o", "m.h5", "--seed", "5"], "'m.h5' already exists", "--force", keep=["m.h5"])
    expect_error(["prepare", "--synthetic", "passkey", "-o", "d.h5"], "'d.h5' already exists",
                 keep=["d.h5"])
    before = digest("m.h5")
    ok("init", "-o", "m.h5", "--seed", "5", "--force")
    assert digest("m.h5") != before


@case
def bad_output_directory_missing():
    expect_error(["init", "-o", "nodir/m.h5"], "directory 'nodir' does not exist")


@case
def bad_prepare_not_utf8():
    with open("latin1.txt", "wb") as f:
        f.write("caf\u00e9".encode("latin-1"))
    expect_error(["prepare", "-o", "x.h5", "latin1.txt"], "'latin1.txt' is not UTF-8", "offset 3")


@case
def bad_prepare_missing_input():
    expect_error(["prepare", "-o", "x.h5", "missing.txt"], "'missing.txt' cannot be read")


@case
def bad_prepare_empty_input():
    open("empty.txt", "w").close()
    expect_error(["prepare", "-o", "x.h5", "empty.txt"], "holds no text")


@case
def bad_passkey_documents_too_short():
    expect_error(["prepare", "--synthetic", "passkey", "--doc-length", "100", "-o", "x.h5"],
                 "cannot hold the task", "at least")


@case
def bad_init_unknown_preset():
    expect_error(["init", "-o", "m.h5", "--preset", "huge"], "unknown model preset 'huge'", "tiny")


@case
def bad_init_inconsistent_sizes():
    expect_error(["init", "-o", "m.h5", "--num-attention-heads", "5"],
                 "hidden_size 64 is not divisible by num_attention_heads 5")


@case
def bad_config_unknown_key():
    with open("run.toml", "w") as f:
        f.write("[init]\nsede = 3\n")
    expect_error(["init", "--config", "run.toml", "-o", "m.h5"], "run.toml", "unknown option 'init.sede'",
                 code=2)


@case
def bad_config_repeated_section_or_key():
    good_model()
    good_dataset()
    train = ["train", "--config", "run.toml", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--dry-run"]
    for text, needles in [
        ("[train]\nlr = 0.1\n[train]\nlr = 0.2\n", ["run.toml", "line 3", "section [train] is given again"]),
        ("[train]\nseq_len = 256\nseq-len = 512\n", ["run.toml", "line 3", "'seq-len' is given again"]),
        ("[train]\nlr =\n", ["--lr", "'' is not a number > 0"]),
    ]:
        with open("run.toml", "w") as f:
            f.write(text)
        expect_error(train, *needles, code=2, keep=["run.toml"])


@case
def bad_config_or_environment_value_names_file_and_line_or_variable():
    """A value refused by its option's rule says where it came from: the config file and its
    line, or the environment variable; one from the command line needs neither."""
    for text, line, value in [("[init]\nseed = 99999999999999999999\n", 2, "99999999999999999999"),
                              ("# a comment\n\n[init]\npreset = 'tiny'\nseed =\n", 5, ""),
                              ("threads = -1\n[init]\n", 1, "-1")]:
        with open("run.toml", "w") as f:
            f.write(text)
        flag = "--threads" if "threads" in text else "--seed"
        expect_error(["init", "--config", "run.toml", "-o", "x.h5"],
                     f"config file 'run.toml': line {line}: {flag}: ", value, code=2, keep=["run.toml"])
    env = {"LCT_INIT_SEED": "99999999999999999999"}
    expect_error(["init", "-o", "x.h5"], "environment variable LCT_INIT_SEED: --seed: '99999999999999999999'",
                 code=2, env=env)
    p = run("init", "-o", "x.h5", "--seed", "-1", env=env)
    assert p.returncode == 2 and "lctrain: error: --seed: -1 is not >= 0" in p.stderr, p.stderr


@case
def bad_numbers_are_refused_where_the_option_is_declared():
    good_model()
    good_dataset()
    train = ["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "256", "--dry-run"]
    for flag, value, rule in [("--lr", "-1", "> 0"), ("--lr", "nan", "> 0"), ("--beta1", "2", "in [0, 1)"),
                              ("--beta2", "-1", "in [0, 1)"), ("--warmup-steps", "-5", ">= 0"),
                              ("--grad-clip", "-1", ">= 0"), ("--checkpoint-every", "-1", ">= 0"),
                              ("--stop-at", "-3", ">= 0"), ("--log-every", "0", ">= 1"),
                              ("--seed", "99999999999999999999", ">= 0"), ("--steps", "0", ">= 1")]:
        expect_error(train + [flag, value], flag, value, rule, code=2)
    expect_error(["--threads", "-1"] + train, "--threads", ">= 0", code=2)
    expect_error(train + ["--min-lr", "0.01", "--lr", "0.001"], "--min-lr 0.01 is above --lr 0.001", code=2)
    expect_error(["init", "-o", "x.h5", "--seed", "99999999999999999999"], "--seed", code=2)
    help_text = ok("train", "--help").stdout
    assert "FLOAT:in [0, 1)" in help_text, "the rule shows in --help"
    # In the footer itself (--time-limit's own help says "exit 86" too).
    footer = help_text[help_text.index("Exit codes:"):]
    for code in ("85 stopped for requeue", "86 stopped at once", "87 the job was aborted"):
        assert code in footer, f"'{code}' missing from the --help footer: {footer}"


@case
def bad_config_missing_file():
    expect_error(["init", "--config", "nope.toml", "-o", "m.h5"], "nope.toml", code=2)


@case
def bad_flag():
    expect_error(["init", "-o", "m.h5", "--hiden-size", "3"], "--hiden-size", code=2)


@case
def bad_threads_oversubscribe():
    ncpu = len(os.sched_getaffinity(0))
    expect_error(["--threads", str(ncpu + 1), "init", "-o", "m.h5"], f"--threads {ncpu} or fewer",
                 "oversubscribes")
    ok("--threads", str(ncpu + 1), "--oversubscribe", "init", "-o", "m.h5")


@case
def bad_threads_two_ranks_fail_together():
    ncpu = len(os.sched_getaffinity(0))
    # Unbound ranks on one host divide its CPUs: each asking for every CPU asks for more than
    # its share, and both stop with one line that says so.
    expect_error(["--threads", str(ncpu), "init", "-o", "m.h5"], "this rank's share of CPUs",
                 "which the launcher gave 2 ranks on host", "oversubscribes", f"use --threads {ncpu // 2}",
                 ranks=2, env={"OMPI_MCA_hwloc_base_binding_policy": "none"})


@case
def bad_train_dataset_vocabulary_larger_than_model():
    good_model()
    good_dataset()
    edit("d.h5", lambda f: f.attrs.__setitem__("vocab_size", 300))
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600"],
                 "vocabulary of 300", "vocab_size 259")


@case
def bad_train_dataset_shorter_than_a_sequence():
    good_model()
    good_dataset()
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "5000"],
                 "holds 1800 tokens, fewer than one sequence")


@case
def resume_from_before_the_packing_rule_warns_only_where_documents_are_split():
    """Checkpoints record the packing rule; one without it (rule 1) resumed on data whose
    documents are longer than a sequence says its data order goes on under the new rule."""
    good_model()
    good_dataset()  # 6 documents of 300 tokens
    for seq_len, split in (("128", True), ("600", False)):
        run_dir = f"r{seq_len}"
        train = ["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", run_dir, "--seq-len", seq_len,
                 "--block-q", "64", "--block-k", "48"]
        ok(*train, "--steps", "2")
        ckpt = f"{run_dir}/checkpoints/step_00000002.h5"
        with h5py.File(ckpt, "r") as f:
            assert f["train_state"].attrs["packing_rule"] == 2
        assert "packing rule" not in ok(*train, "--steps", "3", "--resume", ckpt).stdout
        edit(ckpt, lambda f: f["train_state"].attrs.__delitem__("packing_rule"))
        out = ok(*train, "--steps", "3", "--resume", ckpt).stdout
        assert ("warning: the checkpoint's run packed documents longer than a sequence by an older "
                "rule (packing rule 1, now 2)" in out) == split, out
        with h5py.File(f"{run_dir}/checkpoints/step_00000003.h5", "r") as f:
            assert f["train_state"].attrs["packing_rule"] == 2


@case
def bad_train_previous_run_needs_force():
    good_model()
    good_dataset()
    one = tiny_run("run", steps=1).stdout
    # a single step shows no trend: skipped, not failed (it said FAILED before)
    assert "SKIPPED (a falling loss needs two steps or more)" in one and "FAILED" not in one, one
    assert timing("run")[1]["verification"] == "SKIPPED"
    keep = ["run/timing.h5", "run/checkpoints/step_00000001.h5"]
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "run", "--seq-len", "600"],
                 "holds a previous run", "--force", keep=keep)


@case
def bad_train_run_dir_is_a_file():
    good_model()
    good_dataset()
    open("run", "w").close()
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "run", "--seq-len", "600"],
                 "run directory 'run' cannot be created")


@case
def bad_train_does_not_fit_in_memory():
    good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "2", "--doc-length", "300", "-o", "d.h5")
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600",
                  "--batch-size", "200000"], "GiB are available", "--checkpointing full")
    p = ok("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600", "--dry-run")
    assert "dry run: every check passed" in p.stdout and "memory estimate" in p.stdout
    assert not os.path.exists("r"), "a dry run must not create the run directory"


@case
def bad_bench_sequence_list():
    expect_error(["bench", "attention", "--seq-len", "4096,abc"], "'abc' is not a positive integer")


@case
def bad_parallel_degrees_do_not_match_world():
    good_model()
    good_dataset()
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r",
                  "--seq-len", "600", "--cp", "4"], "dp=1 x cp=4 x tp=1 = 4 ranks", "the job has 2 MPI ranks", ranks=2)
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r",
                  "--seq-len", "600", "--cp", "2", "--dp", "2"], "dp=2 x cp=2 x tp=1 = 4 ranks", "has 2 MPI ranks",
                 ranks=2)


@case
def bad_sequence_not_divisible_by_twice_cp():
    good_model()
    good_dataset()
    expect_error(["--oversubscribe", "train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r",
                  "--seq-len", "602", "--cp", "2"], "--seq-len 602 is not divisible by 2 x cp = 4", "604",
                 ranks=2)


@case
def bad_eval_seq_len_beyond_max_position_embeddings_warns():
    """eval warns, in train's words, when its sequences are longer than the model was made for."""
    ok("init", "-o", "m.h5", "--max-position-embeddings", "512")
    good_dataset()
    warning = "warning: --seq-len 600 exceeds the model's max_position_embeddings 512"
    assert warning in ok("eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "600").stdout
    assert "exceeds" not in ok("eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "512").stdout
    assert warning in tiny_run("r", steps=1).stdout


@case
def bad_model_non_finite_weights():
    """NaN or Inf in a model file is refused on reading (by inspect, eval and train alike),
    naming the tensor and the count: before, training ran into skipped steps only."""
    good_model()
    good_dataset()
    def fn(f):
        w = f["model.layers.1.mlp.up_proj.weight"]
        a = w[:]
        a[3, 5] = np.nan
        a[0, 1:3] = np.inf
        w[...] = a
    edit("m.h5", fn)
    needles = ["'m.h5'", "'model.layers.1.mlp.up_proj.weight'", "1 NaN and 2 infinite values", "11264"]
    expect_error(["inspect", "m.h5"], *needles, keep=["m.h5"])
    expect_error(["eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "600"], *needles)
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--seq-len", "600"],
                 *needles)


@case
def bad_eval_loss_not_finite():
    """Finite weights far too large overflow the forward pass: eval fails (it printed
    'mean loss -nan' and exited 0) and writes no --out."""
    good_model()
    good_dataset()
    edit("m.h5", lambda f: f["model.norm.weight"].__setitem__(..., np.full(64, 3e38, np.float32)))
    expect_error(["eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", "600", "--out", "e.h5"],
                 "mean loss over 1794 targets is NaN", "overflowed float32", "lctrain inspect m.h5")


@case
def bad_inspect_directory_or_pipe():
    """inspect takes a file or a run directory: another directory is an error (it was shown as
    an empty run), and a named pipe is refused before it is opened (opening it hung)."""
    os.mkdir("notes")
    expect_error(["inspect", "notes"], "'notes' is a directory but not a run directory", "timing.h5",
                 "checkpoints/", "inspect shows an HDF5 file")
    os.mkfifo("pipe")
    expect_error(["inspect", "pipe"], "'pipe' is a named pipe", "inspect shows an HDF5 file")
    os.makedirs("r/checkpoints")  # a run that has not reached its first checkpoint yet
    assert "checkpoints: 0" in ok("inspect", "r").stdout


@case
def bad_passkey_dataset_larger_than_memory():
    """A passkey dataset that cannot be built in memory is refused before it is generated, with
    its size and the memory there is (the failed allocation answered with training advice)."""
    expect_error(["prepare", "--synthetic", "passkey", "--num-docs", "100000", "--doc-length", "100000000",
                  "-o", "x.h5"], "--num-docs 100000 x --doc-length 100000000 = 1e+13 tokens",
                 "GiB of memory", "4 bytes per token", "GiB are available", "fewer documents")


@case
def bad_output_path_empty():
    """An empty output path is a command-line error (exit 2) wherever lctrain writes: init -o ''
    failed only at the end, at the rename of its temporary file to ''."""
    good_model()
    good_dataset()
    for args, flag, what in [
        (["init", "-o", ""], "--out", "file"),
        (["prepare", "--synthetic", "passkey", "-o", ""], "--out", "file"),
        (["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", ""], "--run-dir", "directory"),
        (["eval", "--model", "m.h5", "--data", "d.h5", "--out", ""], "--out", "file"),
        (["bench", "attention", "--out", ""], "--out", "file"),
    ]:
        expect_error(args, flag, f"an empty path names no {what}", code=2, keep=["m.h5", "d.h5"])


@case
def help_shows_the_real_default_of_every_flag():
    """--help showed every boolean flag as '--tensors,--no-tensors{false}', whatever its default."""
    for args, flag, default in [(["inspect"], "--tensors,--no-tensors", "true"),
                                (["bench"], "--causal,--no-causal", "true"),
                                ([], "--bind-threads,--no-bind-threads", "true"),
                                ([], "--oversubscribe,--no-oversubscribe", "false"),
                                (["train"], "--dry-run,--no-dry-run", "false")]:
        text = ok(*args, "--help").stdout
        assert f"{flag} (default {default})" in text, (args, text)
        assert "{false}" not in text and "{true}" not in text, text


@case
def environment_variables_are_per_subcommand():
    """LCT_EVAL_SEQ_LEN sets eval's --seq-len and not train's (one LCT_SEQ_LEN fed train, eval,
    prepare, inspect and bench at once); global options keep LCT_<OPTION>."""
    good_model()
    good_dataset()
    env = {"LCT_EVAL_SEQ_LEN": "600", "LCT_TRAIN_SEQ_LEN": "512", "LCT_SEQ_LEN": "256", "LCT_THREADS": "1"}
    p = ok("eval", "--model", "m.h5", "--data", "d.h5", env=env)
    assert "eval: 3 sequences of 600 tokens" in p.stdout, p.stdout
    p = ok("train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "r", "--dry-run", env=env)
    table = dict(l.split()[:2] for l in p.stdout.splitlines() if l.startswith("  ") and len(l.split()) > 1)
    assert table["train.seq_len"] == "512" and table["threads"] == "1", p.stdout
    assert "(Env:LCT_EVAL_SEQ_LEN)" in ok("eval", "--help").stdout


@case
def a_loss_that_moves_only_by_noise_is_inconclusive_not_failed():
    """Steps that barely train (lr 1e-9: each step's loss is its batch's) show no trend: the
    verification says INCONCLUSIVE with the noise margin, not FAILED, and records it; a
    learning run still PASSES (train_loss_falls_and_outputs_are_readable)."""
    good_model()
    ok("prepare", "--synthetic", "passkey", "--num-docs", "24", "--doc-length", "300", "-o", "d24.h5")
    p = ok("train", "--model", "m.h5", "--data", "d24.h5", "--run-dir", "flat", "--seq-len", "600", "--steps", "12",
           "--lr", "1e-9", "--min-lr", "1e-9", "--warmup-steps", "1")
    line = next(l for l in p.stdout.splitlines() if l.startswith("verification:"))
    assert "within the steps' noise (+-" in line and line.endswith(
        "INCONCLUSIVE (more steps, or more sequences per step, tell)"), line
    assert timing("flat")[1]["verification"] == "INCONCLUSIVE"


@case
def dry_run_runs_every_check_of_the_real_run_and_writes_nothing():
    """--dry-run refuses what train refuses after its start-up checks too: a fresh start in a
    run directory that holds a run, and --resume auto with another --seq-len (found and read as
    the resume would, its tensors left unread); it names the checkpoint a resume would take,
    prints the max_position_embeddings warning, and estimates memory on data shorter than one
    sequence with a warning where the real run refuses it. Nothing is written."""
    good_model()
    good_dataset()
    tiny_run("run", steps=2)
    keep = ["run/timing.h5", "run/checkpoints/step_00000002.h5"]
    base = ["train", "--model", "m.h5", "--data", "d.h5", "--dry-run"]
    expect_error([*base, "--run-dir", "run", "--seq-len", "600"], "holds a previous run", "--resume auto",
                 keep=keep)
    expect_error([*base, "--run-dir", "run", "--seq-len", "300", "--resume", "auto"],
                 "was written with seq_len = 600 but this run has 300", keep=keep)
    p = ok(*base, "--run-dir", "run", "--seq-len", "600", "--resume", "auto", "--steps", "4")
    assert "dry run: would resume from 'run/checkpoints/step_00000002.h5' at step 2" in p.stdout, p.stdout
    p = ok(*base, "--run-dir", "fresh", "--seq-len", "8192")  # tiny: 4,096 positions; d.h5: 1,800 tokens
    assert "warning: --seq-len 8192 exceeds the model's max_position_embeddings 4096" in p.stdout, p.stdout
    assert "fewer than one sequence of --seq-len 8192: the real run would refuse it" in p.stdout, p.stdout
    assert "memory estimate per rank" in p.stdout and not os.path.exists("fresh"), p.stdout
    expect_error(["train", "--model", "m.h5", "--data", "d.h5", "--run-dir", "fresh", "--seq-len", "8192"],
                 "fewer than one sequence of --seq-len 8192", "use a shorter --seq-len or more data")


@case
def startup_table_lists_only_the_options_that_differ_from_their_defaults():
    """The start-up table shows what differs from the defaults and counts the rest; the
    provenance of the file written still holds every option, resolved."""
    p = ok("init", "-o", "x.h5", "--preset", "small", "--seed", "7")
    rows = dict(l.split()[:2] for l in p.stdout.splitlines() if l.startswith("  init.") or l.startswith("  threads"))
    assert rows.get("init.seed") == "7" and rows.get("init.preset") == "small" and rows.get("init.out") == "x.h5", rows
    assert "init.hidden_size" not in rows and "threads" not in rows, p.stdout
    m = re.search(r"\((\d+) other options at the default; all are in the provenance", p.stdout)
    assert m and int(m.group(1)) > 10, p.stdout
    with h5py.File("x.h5") as f:
        config = f["provenance/config"].attrs
        assert config["init.seed"] == 7 and config["init.hidden_size"] == 0 and "threads" in config, dict(config)


def main():
    global LCTRAIN, MPIEXEC, MPI_FAMILY
    ap = argparse.ArgumentParser()
    ap.add_argument("--lctrain")
    ap.add_argument("--mpiexec", default="mpiexec")
    ap.add_argument("--mpi-family", default="openmpi", choices=("openmpi", "mpich"))
    ap.add_argument("--list", action="store_true")
    ap.add_argument("case", nargs="?")
    a = ap.parse_args()
    if a.list:  # the cases of the script that was run (ops_cases.py imports this one)
        print(";".join(n for n, fn in CASES.items() if fn.__module__ == "__main__"))
        return 0
    LCTRAIN, MPIEXEC, MPI_FAMILY = os.path.abspath(a.lctrain), a.mpiexec, a.mpi_family
    work = tempfile.mkdtemp(prefix=f"lct_{a.case}_")
    os.chdir(work)
    try:
        CASES[a.case]()
    except Skip as e:
        print("SKIP", a.case + ":", e)
        return SKIP_CODE
    finally:
        os.chdir("/")
        shutil.rmtree(work, ignore_errors=True)
    print("PASS", a.case)
    return 0


if __name__ == "__main__":
    sys.exit(main())
