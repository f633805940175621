#!/usr/bin/python3
"""lctrain convert: Hugging Face Llama directories (config.json + safetensors, written here by
hand: no safetensors package needed) to model files and back, the loss of a converted model
against PyTorch computed straight from the Hugging Face weights, and every refused input.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/convert_cases.py --lctrain build/app/lctrain CASE
"""
import importlib.util
import json
import os
import shutil
import struct
import sys

import h5py
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, digest, expect_error, ok, run  # noqa: E402

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..")
DTYPES = {"F32": ("<f4", 4), "BF16": ("<u2", 2), "F16": ("<f2", 2), "F64": ("<f8", 8)}


def tiny_config(**over):
    """The `tiny` preset as a Hugging Face LlamaConfig."""
    c = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 259,
         "hidden_size": 64, "intermediate_size": 176, "num_hidden_layers": 2, "num_attention_heads": 4,
         "num_key_value_heads": 2, "max_position_embeddings": 4096, "rope_theta": 10000.0,
         "rms_norm_eps": 1e-5, "initializer_range": 0.02, "tie_word_embeddings": False,
         "sliding_window": None, "hidden_act": "silu", "attention_bias": False, "rope_scaling": None,
         "torch_dtype": "float32"}
    c.update(over)
    return c


def shapes(cfg):
    C, I, V = cfg["hidden_size"], cfg["intermediate_size"], cfg["vocab_size"]
    D = C // cfg["num_attention_heads"]
    H, KV = cfg["num_attention_heads"] * D, cfg["num_key_value_heads"] * D
    out = [("model.embed_tokens.weight", (V, C))]
    for l in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (C,)), (p + "self_attn.q_proj.weight", (H, C)),
                (p + "self_attn.k_proj.weight", (KV, C)), (p + "self_attn.v_proj.weight", (KV, C)),
                (p + "self_attn.o_proj.weight", (C, H)), (p + "post_attention_layernorm.weight", (C,)),
                (p + "mlp.gate_proj.weight", (I, C)), (p + "mlp.up_proj.weight", (I, C)),
                (p + "mlp.down_proj.weight", (C, I))]
    out.append(("model.norm.weight", (C,)))
    if not cfg["tie_word_embeddings"]:
        out.append(("lm_head.weight", (V, C)))
    return out


def bf16_bits(x):
    """float32 -> bf16 bits, round to nearest even (as lctrain and PyTorch do)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)


def widen_bf16(bits):
    return (bits.astype(np.uint32) << 16).view(np.float32)


def random_weights(cfg, seed=1, std=0.2):
    rng = np.random.default_rng(seed)
    w = {}
    for name, shape in shapes(cfg):
        if len(shape) == 1:
            w[name] = (1 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            w[name] = (std * rng.standard_normal(shape)).astype(np.float32)
    return w


def encode(arr, dtype):
    """(raw little-endian bytes, the fp32 values lctrain should read) of arr stored as dtype."""
    if dtype == "BF16":
        bits = bf16_bits(arr)
        return bits.astype("<u2").tobytes(), widen_bf16(bits)
    if dtype == "F16":
        h = arr.astype("<f2")
        return h.tobytes(), h.astype(np.float32)
    if dtype == "F64":
        return arr.astype("<f8").tobytes(), arr.astype(np.float64)
    return arr.astype("<f4").tobytes(), arr.astype(np.float32)


def write_st(path, tensors, metadata=None, header_edit=None):
    """Writes a safetensors file by hand; tensors: {name: (dtype, raw bytes, shape)}."""
    header, at, blobs = {"__metadata__": metadata or {"format": "pt"}}, 0, []
    for name, (dtype, raw, shape) in tensors.items():
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [at, at + len(raw)]}
        at += len(raw)
        blobs.append(raw)
    if header_edit:
        header_edit(header)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def read_st(path):
    """{name: fp32 or widened values}, metadata."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(n))
        data = f.read()
    out = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, end = e["data_offsets"]
        a = np.frombuffer(data[b:end], DTYPES[e["dtype"]][0]).reshape(e["shape"])
        out[name] = widen_bf16(a) if e["dtype"] == "BF16" else a.astype(np.float32)
    return out, header.get("__metadata__", {})


def hf_dir(path, dtype="F32", shards=1, cfg=None, weights=None, extra=None, drop=(), edit_cfg=None,
           header_edit=None):
    """A Hugging Face checkpoint directory; returns the fp32 values lctrain should read."""
    cfg = cfg or tiny_config()
    weights = weights or random_weights(cfg)
    os.makedirs(path)
    c = dict(cfg, torch_dtype={"F32": "float32", "BF16": "bfloat16", "F16": "float16"}.get(dtype, "float64"))
    if edit_cfg:
        edit_cfg(c)
    with open(f"{path}/config.json", "w") as f:
        json.dump(c, f, indent=2)
    tensors, expect = {}, {}
    for name, arr in weights.items():
        if name in drop:
            continue
        raw, expect[name] = encode(arr, dtype)
        tensors[name] = (dtype, raw, arr.shape)
    for name, (dt, arr) in (extra or {}).items():
        tensors[name] = (dt, encode(arr, dt)[0], arr.shape)
    names = list(tensors)
    if shards == 1:
        write_st(f"{path}/model.safetensors", tensors, header_edit=header_edit)
        return expect
    weight_map = {}
    for s in range(shards):
        file = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        part = {n: tensors[n] for n in names[s::shards]}
        write_st(f"{path}/{file}", part)
        weight_map.update({n: file for n in part})
    with open(f"{path}/model.safetensors.index.json", "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f)
    return expect


def h5_tensors(path):
    with h5py.File(path, "r") as f:
        return ({k: f[k][:] for k in f.keys() if k.endswith(".weight")},
                {k: f.attrs[k] for k in f.attrs if k not in ("lctrain_file", "format_version")})


def assert_bitwise(got, want, what):
    assert sorted(got) == sorted(want), (what, sorted(set(got) ^ set(want)))
    for k in want:
        g, w = np.asarray(got[k], np.float32), np.asarray(want[k], np.float32)
        assert g.shape == w.shape, (what, k, g.shape, w.shape)
        assert np.array_equal(g.view(np.uint32), w.view(np.uint32)), f"{what}: {k} differs"


def from_hf(src, out, *extra):
    return ok("convert", "--from-hf", src, "-o", out, *extra)


# --- good conversions ---------------------------------------------------------------------

@case
def from_hf_fp32_bf16_fp16_single_file_and_sharded_equal_the_source():
    for dtype, shards in [("F32", 1), ("BF16", 1), ("F16", 1), ("F32", 3), ("BF16", 2)]:
        name = f"{dtype}_{shards}"
        inv_freq = {"model.layers.0.self_attn.rotary_emb.inv_freq": ("F32", np.ones(8, np.float32))}
        want = hf_dir(name, dtype, shards, extra=inv_freq)
        p = from_hf(name, f"{name}.h5")
        assert f"{shards} safetensors file" in p.stdout and f"21 {dtype}" in p.stdout, p.stdout
        assert "1 ignored" in p.stdout, p.stdout
        got, attrs = h5_tensors(f"{name}.h5")
        assert_bitwise(got, want, name)
        assert attrs["model_type"] == "llama" and attrs["num_key_value_heads"] == 2, attrs
        assert attrs["rms_norm_eps"] == 1e-5 and attrs["sliding_window"] == 0, attrs
        ok("inspect", f"{name}.h5")  # lctrain reads what it wrote
        print(f"{dtype} in {shards} file(s): 21 tensors equal the source bit for bit")
    # Every finite F16 value (subnormals, signed zeros, the largest) widened exactly.
    cfg = tiny_config()
    bits = np.arange(1 << 16, dtype=np.uint16)
    every = bits.view(np.float16)[np.isfinite(bits.view(np.float16))].astype(np.float32)
    w, at = {}, 0
    for name, shape in shapes(cfg):
        n = int(np.prod(shape))
        w[name] = np.resize(np.roll(every, -at), n).reshape(shape)
        at += n
    assert at > len(every)
    want = hf_dir("f16_all", "F16", cfg=cfg, weights=w)
    from_hf("f16_all", "f16_all.h5")
    assert_bitwise(h5_tensors("f16_all.h5")[0], want, "every F16 value")
    print(f"all {len(every)} finite F16 values widened exactly")
    # HF defaults for keys a config.json may leave out, and tied embeddings.
    full = tiny_config(tie_word_embeddings=True, sliding_window=64, num_key_value_heads=4)
    cfg = {k: v for k, v in full.items()
           if k not in ("num_key_value_heads", "rms_norm_eps", "rope_theta", "initializer_range")}
    want = hf_dir("tied", cfg=cfg, weights=random_weights(full))
    from_hf("tied", "tied.h5")
    got, attrs = h5_tensors("tied.h5")
    assert_bitwise(got, want, "tied")
    assert "lm_head.weight" not in got and attrs["tie_word_embeddings"], attrs
    assert attrs["num_key_value_heads"] == 4 and attrs["rms_norm_eps"] == 1e-6, attrs  # LlamaConfig's
    assert attrs["sliding_window"] == 64 and attrs["rope_theta"] == 10000.0, attrs
    print("tied, defaults and sliding_window as Hugging Face reads them")


@case
def round_trip_h5_to_hf_to_h5_is_bit_exact():
    for preset_args in ([], ["--tie-word-embeddings", "true", "--sliding-window", "48"]):
        tag = "tied" if preset_args else "untied"
        ok("init", "-o", f"{tag}.h5", "--preset", "tiny", "--seed", "7", *preset_args)
        p = ok("convert", "--to-hf", f"{tag}_hf", "--model", f"{tag}.h5")
        assert "F32 (exact)" in p.stdout, p.stdout
        assert sorted(os.listdir(f"{tag}_hf")) == ["config.json", "model.safetensors"], os.listdir(f"{tag}_hf")
        with open(f"{tag}_hf/config.json") as f:
            cfg = json.load(f)
        src, attrs = h5_tensors(f"{tag}.h5")
        assert cfg["architectures"] == ["LlamaForCausalLM"] and cfg["model_type"] == "llama", cfg
        assert cfg["head_dim"] == 16 and cfg["hidden_act"] == "silu" and cfg["rope_scaling"] is None, cfg
        for k in ("vocab_size", "hidden_size", "num_hidden_layers", "num_key_value_heads", "rms_norm_eps",
                  "rope_theta", "tie_word_embeddings", "initializer_range", "max_position_embeddings"):
            assert cfg[k] == attrs[k], (k, cfg[k], attrs[k])
        assert cfg["sliding_window"] == (48 if preset_args else None), cfg["sliding_window"]
        st, meta = read_st(f"{tag}_hf/model.safetensors")
        assert meta["format"] == "pt" and "lctrain_version" in meta, meta
        assert_bitwise(st, src, f"{tag}: safetensors")
        from_hf(f"{tag}_hf", f"{tag}_back.h5")
        back, back_attrs = h5_tensors(f"{tag}_back.h5")
        assert_bitwise(back, src, f"{tag}: round trip")
        assert back_attrs == attrs, (back_attrs, attrs)
        print(f"{tag}: .h5 -> Hugging Face -> .h5 bit-exact, config equal")
    ok("convert", "--to-hf", "bf16_hf", "--model", "untied.h5", "--dtype", "bf16")
    st, _ = read_st("bf16_hf/model.safetensors")
    with open("bf16_hf/model.safetensors", "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        assert {e["dtype"] for k, e in json.loads(f.read(n)).items() if k != "__metadata__"} == {"BF16"}
    src, _ = h5_tensors("untied.h5")
    assert_bitwise(st, {k: widen_bf16(bf16_bits(v)) for k, v in src.items()}, "bf16 export")
    print("--dtype bf16: every value rounded to nearest even")


@case
def tokenizer_goes_to_hugging_face_and_back():
    """A checkpoint's tokenizer becomes Hugging Face's files (tokenizer.model and a
    tokenizer_config.json naming its special pieces as Python's sentencepiece spells them; for
    the byte tokenizer a description) with the bos/eos/pad ids in config.json and
    generation_config.json; --from-hf records it in the model file again."""
    import tokenizer_cases as tc
    tc.corpus(docs=120)
    ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", "bpe", "--vocab-size", "400", "-o", "sp.h5")
    ok("prepare", "--synthetic", "passkey", "--num-docs", "8", "--doc-length", "256", "-o", "bytes.h5")
    ok("init", "-o", "m.h5", "--preset", "tiny", "--vocab-size", "400")
    for name, data in (("sp", "sp.h5"), ("bytes", "bytes.h5")):
        ok("train", "--model", "m.h5", "--data", data, "--seq-len", "256", "--steps", "1", "--run-dir", name)
        ck = f"{name}/checkpoints/step_00000001.h5"
        p = ok("convert", "--to-hf", f"{name}_hf", "--model", ck)
        assert "tokenizer:" in p.stdout and "generation_config.json" in p.stdout, p.stdout
        with h5py.File(data, "r") as f:
            t = dict(f["tokenizer"].attrs) if "tokenizer" in f else None
            model_bytes = bytes(f["tokenizer/model"][:]) if "tokenizer/model" in f else None
        with open(f"{name}_hf/config.json") as f:
            cfg = json.load(f)
        with open(f"{name}_hf/generation_config.json") as f:
            gen = json.load(f)
        with open(f"{name}_hf/tokenizer_config.json") as f:
            tcfg = json.load(f)
        ids = (256, 257, 258) if name == "bytes" else (t["bos_token_id"], t["eos_token_id"], t["pad_token_id"])
        for key, want in zip(("bos_token_id", "eos_token_id", "pad_token_id"), ids):
            assert cfg[key] == want and gen[key] == want, (name, key, cfg.get(key), gen.get(key), want)
        if name == "sp":
            assert open("sp_hf/tokenizer.model", "rb").read() == model_bytes
            sp = tc.python_sentencepiece().SentencePieceProcessor(model_file="sp_hf/tokenizer.model")
            assert tcfg["tokenizer_class"] == "LlamaTokenizer", tcfg
            assert (tcfg["bos_token"], tcfg["eos_token"], tcfg["unk_token"]) == \
                (sp.id_to_piece(sp.bos_id()), sp.id_to_piece(sp.eos_id()), sp.id_to_piece(sp.unk_id())), tcfg
        else:
            assert not os.path.exists("bytes_hf/tokenizer.model") and tcfg["lctrain_tokenizer"] == "byte", tcfg
        p = from_hf(f"{name}_hf", f"{name}_back.h5")
        with h5py.File(f"{name}_back.h5", "r") as f, h5py.File(ck, "r") as c:
            assert dict(f["tokenizer"].attrs) == dict(c["tokenizer"].attrs), (dict(f["tokenizer"].attrs),)
            if name == "sp":
                assert bytes(f["tokenizer/model"][:]) == model_bytes
        assert "recorded in the model file" in p.stdout, p.stdout
    # config.json's ids must be the tokenizer's beside it.
    with open("sp_hf/config.json") as f:
        cfg = json.load(f)
    cfg["eos_token_id"] = 5
    with open("sp_hf/config.json", "w") as f:
        json.dump(cfg, f)
    expect_error(["convert", "--from-hf", "sp_hf", "-o", "bad.h5"], "eos_token_id 5", "different checkpoints")
    # A model file from init records no tokenizer: nothing beside the weights, and a note.
    p = ok("convert", "--to-hf", "init_hf", "--model", "m.h5")
    assert "records no tokenizer" in p.stdout and sorted(os.listdir("init_hf")) == ["config.json", "model.safetensors"]


def load_torch_reference():
    spec = importlib.util.spec_from_file_location("torch_reference", os.path.join(ROOT, "tests", "golden", "torch_reference.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@case
def converted_model_loss_matches_pytorch_on_the_hugging_face_weights():
    """The eval loss of the converted model equals PyTorch's (float64, rotate_half RoPE as in
    Hugging Face's modeling_llama) computed from the safetensors weights directly: the q/k
    layouts agree without any permutation. The same loss with q and k permuted to the
    interleaved (GPT-J) layout differs, so the comparison would see a wrong layout."""
    import torch
    ref = load_torch_reference()
    cfg = tiny_config(rope_theta=500.0)  # small theta: positions change the scores a lot
    hf_dir("hf", "BF16", cfg=cfg, weights=random_weights(cfg, seed=3, std=0.25))
    from_hf("hf", "m.h5")
    with open("a.txt", "w") as f:
        f.write("The pass key is 71432. Remember it. " * 3)
    with open("b.txt", "w") as f:
        f.write("Hugging Face and lctrain agree on rotate_half.")
    ok("prepare", "a.txt", "b.txt", "-o", "d.h5")
    with h5py.File("d.h5", "r") as f:
        tokens, offs = f["tokens"][:].astype(np.int64), f["doc_offsets"][:]
    S = int(offs[-1]) + 5  # both documents in one packed sequence, then padding
    ok("eval", "--model", "m.h5", "--data", "d.h5", "--seq-len", S, "--out", "e.h5", "--block-q", "16",
       "--block-k", "16")
    with h5py.File("e.h5", "r") as f:
        lct_loss, valid = float(f.attrs["mean_loss"]), int(f.attrs["valid_targets"])

    P, _ = read_st("hf/model.safetensors")
    P = {k: torch.tensor(v, dtype=torch.float64) for k, v in P.items()}
    b = {k: np.full(S, v, np.int64) for k, v in [("tokens", 258), ("targets", -1), ("doc", -1), ("idx", 0), ("pos", 0)]}
    for d in range(len(offs) - 1):
        a, e = int(offs[d]), int(offs[d + 1])
        b["tokens"][a:e] = tokens[a:e]
        b["targets"][a:e - 1] = tokens[a + 1:e]
        b["doc"][a:e], b["idx"][a:e], b["pos"][a:e] = d, np.arange(e - a), np.arange(e - a)
    b = {k: torch.tensor(v) for k, v in b.items()}
    assert valid == int((b["targets"] >= 0).sum()), valid
    with torch.no_grad():
        torch_loss = float(ref.loss_sum(dict(cfg, sliding_window=0), P, b, S)) / valid
        D = cfg["hidden_size"] // cfg["num_attention_heads"]
        perm = torch.cat([torch.arange(0, D, 2), torch.arange(1, D, 2)])  # interleaved -> halves
        Q = dict(P)
        for k in P:
            if k.endswith(("q_proj.weight", "k_proj.weight")):
                w = P[k].view(-1, D, P[k].shape[1])
                Q[k] = w[:, torch.argsort(perm), :].reshape(P[k].shape)
        permuted = float(ref.loss_sum(dict(cfg, sliding_window=0), Q, b, S)) / valid
    rel = abs(lct_loss - torch_loss) / abs(torch_loss)
    print(f"lctrain eval {lct_loss:.10f}, PyTorch {torch_loss:.10f} over {valid} targets: relative {rel:.2e}; "
          f"with q/k permuted to the interleaved layout {permuted:.6f}")
    assert rel < 1e-5, rel
    assert abs(permuted - torch_loss) / torch_loss > 1e-3, "the permutation test cannot tell layouts apart"


# --- refused inputs: exit 1, one 'lctrain: error:' line, no output file ------------------

def refused(src, *needles):
    expect_error(["convert", "--from-hf", src, "-o", "out.h5"], *needles)
    assert not os.path.exists("out.h5")


@case
def bad_hf_another_model_type_or_architecture():
    hf_dir("mistral", edit_cfg=lambda c: c.update(model_type="mistral"))
    refused("mistral", "mistral/config.json", "model_type is \"mistral\"", "Llama checkpoints only")
    hf_dir("arch", edit_cfg=lambda c: c.update(architectures=["LlamaForSequenceClassification"]))
    refused("arch", "arch/config.json", "LlamaForSequenceClassification", "LlamaForCausalLM")


@case
def rope_scaling_converts_both_ways_and_unknown_types_are_refused():
    """config.json's rope_scaling dict <-> the model file's rope_scaling.* attributes: Llama
    3.1's llama3 scaling (and the older "type" key) in, a yarn model out and back bit-exact
    with only the keys its type reads; a type lctrain lacks is refused, naming it."""
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 512}
    hf_dir("l3", edit_cfg=lambda c: c.update(rope_scaling=llama3))
    from_hf("l3", "l3.h5")
    _, attrs = h5_tensors("l3.h5")
    for k, v in llama3.items():
        assert attrs[f"rope_scaling.{k}"] == v, (k, attrs[f"rope_scaling.{k}"], v)
    hf_dir("old", edit_cfg=lambda c: c.update(rope_scaling={"type": "linear", "factor": 2.0}))
    from_hf("old", "old.h5")
    _, attrs = h5_tensors("old.h5")
    assert attrs["rope_scaling.rope_type"] == "linear" and attrs["rope_scaling.factor"] == 2.0, attrs
    ok("init", "-o", "y.h5", "--preset", "tiny", "--rope-scaling", "yarn", "--rope-factor", "4",
       "--rope-original-max-position-embeddings", "1024")
    ok("convert", "--to-hf", "y_hf", "--model", "y.h5")
    with open("y_hf/config.json") as f:
        rs = json.load(f)["rope_scaling"]
    assert rs == {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024}, rs
    from_hf("y_hf", "y_back.h5")
    (a, aa), (b, ba) = h5_tensors("y.h5"), h5_tensors("y_back.h5")
    assert aa == ba, (aa, ba)
    assert_bitwise(b, a, "yarn round trip")
    hf_dir("lr", edit_cfg=lambda c: c.update(rope_scaling={"rope_type": "longrope", "factor": 4.0}))
    refused("lr", "lr/config.json", "rope_scaling.rope_type is 'longrope'")


@case
def bad_hf_attention_bias():
    hf_dir("flag", edit_cfg=lambda c: c.update(attention_bias=True))
    refused("flag", "flag/config.json", "attention_bias is true", "no bias terms")
    hf_dir("tensor", extra={"model.layers.1.self_attn.q_proj.bias": ("F32", np.zeros(64, np.float32))})
    refused("tensor", "tensor/model.safetensors", "model.layers.1.self_attn.q_proj.bias", "no bias terms")


@case
def bad_hf_missing_tensor_or_shard():
    hf_dir("one", drop=("model.layers.1.mlp.up_proj.weight",))
    refused("one", "model.layers.1.mlp.up_proj.weight", "is missing from", "one/model.safetensors")
    hf_dir("sharded", shards=2)
    os.remove("sharded/model-00002-of-00002.safetensors")
    refused("sharded", "model-00002-of-00002.safetensors", "does not exist")
    os.makedirs("empty")
    refused("empty", "'empty' has no config.json")


@case
def bad_hf_shape_mismatch():
    cfg = tiny_config()
    w = random_weights(cfg)
    w["model.layers.0.self_attn.k_proj.weight"] = w["model.layers.0.self_attn.q_proj.weight"]  # [64, 64]
    hf_dir("shape", cfg=cfg, weights=w)
    refused("shape", "shape/model.safetensors", "model.layers.0.self_attn.k_proj.weight", "[64, 64]", "[32, 64]")
    hf_dir("layers", edit_cfg=lambda c: c.update(num_hidden_layers=1))
    refused("layers", "model.layers.1.", "not part of a Llama model with this config.json")


@case
def bad_hf_unknown_dtype():
    hf_dir("f64", "F64")
    refused("f64", "f64/model.safetensors", "dtype F64", "F32, BF16 and F16")


@case
def bad_hf_truncated_file_or_offsets_outside_it():
    hf_dir("trunc")
    size = os.path.getsize("trunc/model.safetensors")
    with open("trunc/model.safetensors", "r+b") as f:
        f.truncate(size - 100)
    refused("trunc", "trunc/model.safetensors", "lm_head.weight", "outside the file", "truncated")

    def past_end(h):
        h["model.norm.weight"]["data_offsets"] = [10 ** 9, 10 ** 9 + 256]
    hf_dir("offsets", header_edit=past_end)
    refused("offsets", "offsets/model.safetensors", "model.norm.weight", "[1000000000, 1000000256]", "outside the file")
    hf_dir("header")
    with open("header/model.safetensors", "r+b") as f:
        f.write(struct.pack("<Q", 10 ** 12))
    refused("header", "header/model.safetensors", "header says it is 1000000000000 bytes")


@case
def bad_convert_outputs_and_command_lines():
    hf_dir("hf")
    cc.good_model("m.h5")
    os.makedirs("out_hf")
    with open("out_hf/config.json", "w") as f:
        f.write("{}\n")
    expect_error(["convert", "--to-hf", "out_hf", "--model", "m.h5"], "config.json", "already exists", "--force",
                 keep=["out_hf/config.json"])
    assert os.listdir("out_hf") == ["config.json"], os.listdir("out_hf")
    expect_error(["convert", "--to-hf", "new_hf", "--model", "missing.h5"], "missing.h5")
    expect_error(["convert", "--from-hf", "hf", "-o", "m.h5"], "m.h5", "already exists", keep=["m.h5"])
    expect_error(["convert", "--from-hf", "hf", "--to-hf", "x", "-o", "o.h5"], "exactly one of", code=2)
    expect_error(["convert", "--from-hf", "hf"], "give -o", code=2)
    expect_error(["convert", "--to-hf", "x", "--model", "m.h5", "--dtype", "fp16"], "--dtype", code=2)
    ok("convert", "--to-hf", "out_hf", "--model", "m.h5", "--force")
    assert sorted(os.listdir("out_hf")) == ["config.json", "model.safetensors"], os.listdir("out_hf")



@case
def bad_hf_tensors_that_do_not_tile_the_data():
    """The format requires data offsets that tile the data: two tensors on the same bytes
    (other bytes owned by none), a hole between tensors, or bytes after the last are refused."""
    def overlap(h):
        a, b = "model.layers.0.input_layernorm.weight", "model.layers.0.post_attention_layernorm.weight"
        h[b]["data_offsets"] = list(h[a]["data_offsets"])
    hf_dir("overlap", header_edit=overlap)
    refused("overlap", "overlap/model.safetensors", "input_layernorm.weight", "post_attention_layernorm.weight",
            "overlap", "tile the data")

    def hole(h):  # the last tensor moved 4 bytes on: a hole before it
        last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
        b, e = h[last]["data_offsets"]
        h[last]["data_offsets"] = [b + 4, e + 4]
    hf_dir("hole", header_edit=hole)
    with open("hole/model.safetensors", "ab") as f:
        f.write(b"\0" * 4)
    refused("hole", "hole/model.safetensors", "belong to no tensor", "tile the data")
    hf_dir("tail")
    with open("tail/model.safetensors", "ab") as f:
        f.write(b"\0" * 8)
    refused("tail", "tail/model.safetensors", "the last 8 data bytes belong to no tensor")


@case
def bad_hf_symlinks_that_lead_nowhere_are_named():
    """A Hugging Face cache snapshot is symlinks into ../../blobs: copied without the blobs,
    model.safetensors is a dangling link, which is named as one (not reported as absent)."""
    hf_dir("snap")
    os.remove("snap/model.safetensors")
    os.symlink("../../blobs/0123abcd", "snap/model.safetensors")
    refused("snap", "snap/model.safetensors", "symbolic link to '../../blobs/0123abcd'", "does not exist",
            "cp -rL")
    hf_dir("loop")
    os.remove("loop/model.safetensors")
    os.symlink("model.safetensors", "loop/model.safetensors")
    refused("loop", "loop/model.safetensors", "loops")
    hf_dir("cfg")
    os.remove("cfg/config.json")
    os.symlink("../../blobs/cafe", "cfg/config.json")
    refused("cfg", "cfg/config.json", "does not exist")
    # a link that resolves is read as the file
    hf_dir("real")
    os.makedirs("blobs")
    os.rename("real/model.safetensors", "blobs/w")
    os.symlink("../blobs/w", "real/model.safetensors")
    from_hf("real", "real.h5")


@case
def a_pair_mixed_by_a_stopped_convert_is_refused():
    """convert --to-hf --force replaces model.safetensors, then config.json: stopped between the
    two, the directory holds new weights beside the old config.json. Both files carry one pair
    id, so reading the mixture back is refused instead of converting it."""
    ok("init", "-o", "a.h5", "--preset", "tiny", "--seed", "1")
    ok("init", "-o", "b.h5", "--preset", "tiny", "--seed", "2")
    ok("convert", "--to-hf", "out_hf", "--model", "a.h5")
    ok("convert", "--to-hf", "b_hf", "--model", "b.h5")
    from_hf("out_hf", "a_back.h5")
    with open("out_hf/config.json") as f, open("b_hf/config.json") as g:
        ca, cb = json.load(f), json.load(g)
    assert ca.pop("lctrain_pair") != cb.pop("lctrain_pair") and ca == cb
    # The state a convert --to-hf --force of b.h5 leaves when killed between its renames.
    shutil.copy("b_hf/model.safetensors", "out_hf/model.safetensors")
    refused("out_hf", "out_hf/config.json", "out_hf/model.safetensors", "are not one pair", "convert again")
    ok("convert", "--to-hf", "out_hf", "--model", "b.h5", "--force")
    from_hf("out_hf", "b_back.h5")

if __name__ == "__main__":
    sys.exit(cc.main())
