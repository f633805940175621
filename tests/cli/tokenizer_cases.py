#!/usr/bin/python3
"""SentencePiece tokenizers end to end: prepare trains a BPE and a unigram model on a corpus
generated here (no downloads) or loads one trained by Python's sentencepiece package, and
every id and every decode must equal that package's on the same model (extracted from the
dataset file with h5py), non-ASCII and characters never seen in training (byte fallback)
included; train and eval on such data; checkpoints record the tokenizer; bad input.

Each case is one ctest test. Helpers and the runner come from cli_cases.py.
Run by hand: /usr/bin/python3 tests/cli/tokenizer_cases.py --lctrain build/app/lctrain CASE
"""
import os
import random
import sys

import h5py
import numpy as np

try:  # the reference; listing the cases (cmake does, also for `quickstart.sh run`) needs none
    import sentencepiece as spm
except ImportError:
    spm = None

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import cli_cases as cc  # noqa: E402
from cli_cases import case, expect_error, ok, timing  # noqa: E402

# Held-out documents: accents and scripts the corpus has, and some it never shows (CJK, emoji,
# Devanagari, a tab, runs of spaces, a leading space, digits), so byte fallback is exercised.
HELD_OUT = [
    "Der Käse ist grün, la crème brûlée est sucrée.",
    "  Two leading spaces,\ttab, and  double  spaces at 12:45 on 2026-11-23.",
    "漢字とかなの文章。Emoji too: 🦀🚀 and नमस्ते दुनिया.",
    "Ελληνικά και русский текст вместе\nwith a newline\n\nand a blank line.",
    "Numbers 31415926535 and symbols ~!@#$%^&*()_+{}|:\"<>? end.",
]


def corpus(path="corpus.txt", docs=700, seed=7):
    """About 300 KB of varied sentences, documents separated by blank lines: an invented
    lexicon (so that BPE and unigram have pieces to find) with English glue words and some
    German, French, Greek and Russian words."""
    r = random.Random(seed)
    syl = ["ka", "lo", "mi", "tur", "sen", "bra", "qui", "dov", "el", "ash", "pri", "zon", "ve", "nu",
           "gor", "thi", "pla", "rek", "o", "an"]
    lexicon = ["".join(r.choice(syl) for _ in range(r.randint(1, 4))) for _ in range(1500)]
    glue = ["the", "a", "of", "and", "to", "in", "with", "for", "on", "under", "after", "before"]
    foreign = ["Straße", "Mädchen", "über", "café", "déjà", "garçon", "λόγος", "θάλασσα", "привет",
               "молоко", "Zürich", "naïve"]
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(docs):
            sents = []
            for _ in range(r.randint(2, 10)):
                words = [r.choice(lexicon if r.random() < 0.6 else glue) for _ in range(r.randint(4, 14))]
                if r.random() < 0.3:
                    words.insert(r.randrange(len(words)), r.choice(foreign))
                if r.random() < 0.2:
                    words.append(str(r.randint(0, 99999)))
                sents.append(" ".join(words).capitalize() + r.choice([".", "!", "?", ";"]))
            f.write(" ".join(sents) + ("\n" if r.random() < 0.3 else "") + "\n\n")
    with open(path, encoding="utf-8") as f:
        return [d for d in f.read().split("\n\n") if d]


def python_sentencepiece():
    """Python's sentencepiece package, the reference every case compares with."""
    assert spm is not None, "these tests compare with Python's sentencepiece: apt-get install python3-sentencepiece"
    return spm


def held_out(path="held.txt"):
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n\n\n".join(HELD_OUT))
    return HELD_OUT


def model_of(dataset, out):
    """The SentencePiece model a dataset (or checkpoint) stores, written as a .model file."""
    with h5py.File(dataset, "r") as f:
        data = bytes(f["tokenizer/model"][:])
    with open(out, "wb") as m:
        m.write(data)
    return python_sentencepiece().SentencePieceProcessor(model_file=out)


def documents(dataset):
    with h5py.File(dataset, "r") as f:
        tok, off = f["tokens"][:], f["doc_offsets"][:]
    return [tok[off[i]:off[i + 1]].tolist() for i in range(len(off) - 1)]


def assert_same_as_python(dataset, texts, sp):
    """Every document is BOS + Python's ids + EOS, and Python decodes it back to the text."""
    docs = documents(dataset)
    assert len(docs) == len(texts), (len(docs), len(texts))
    for i, (ids, text) in enumerate(zip(docs, texts)):
        want = [sp.bos_id()] + sp.encode(text) + [sp.eos_id()]
        assert ids == want, f"document {i}: lctrain {ids[:20]}... python {want[:20]}..."
        assert sp.decode(ids) == text, f"document {i} does not round trip: {sp.decode(ids)!r}"
    return docs


def assert_inspect_decodes(dataset, text):
    """inspect decodes document 0 (short: all of it) with the stored model."""
    p = ok("inspect", dataset)
    line = next(l for l in p.stdout.splitlines() if "document 0 starts:" in l)
    assert f"document 0 starts: <bos>{text}<eos>" in line, line


@case
def sentencepiece_bpe_and_unigram_match_python():
    texts = corpus()
    held = held_out()
    sizes = os.path.getsize("corpus.txt")
    assert sizes > 200_000, sizes
    for kind in ["bpe", "unigram"]:
        p = ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", kind, "--vocab-size", "1200",
               "--seq-len", "512", "-o", f"{kind}.h5")
        assert f"sentencepiece ({kind}), vocab_size 1200" in p.stdout, p.stdout
        assert "tokens per document: mean" in p.stdout and "packing at seq_len 512" in p.stdout, p.stdout
        with h5py.File(f"{kind}.h5", "r") as f:
            a, t = f.attrs, f["tokenizer"].attrs
            assert a["tokenizer"] == "sentencepiece" and a["vocab_size"] == 1200
            assert (a["bos_token_id"], a["eos_token_id"], a["pad_token_id"]) == (1, 2, 3)
            assert t["type"] == kind and t["name"] == "sentencepiece", dict(t)
        sp = model_of(f"{kind}.h5", f"{kind}.model")
        assert sp.get_piece_size() == 1200 and sp.unk_id() == 0 and sp.pad_id() == 3
        assert_same_as_python(f"{kind}.h5", texts, sp)
        # Unseen characters: the same model through --tokenizer-model, ids and text as Python's.
        ok("prepare", "held.txt", "--separator", "\\n\\n\\n", "--tokenizer-model", f"{kind}.model",
           "-o", f"{kind}_held.h5")
        docs = assert_same_as_python(f"{kind}_held.h5", held, sp)
        fallback = [i for d in docs for i in d if sp.is_byte(i)]
        assert len(fallback) >= 20, f"byte fallback barely used: {fallback}"
        assert_inspect_decodes(f"{kind}_held.h5", held[0])
        # Deterministic: the same input trains the same model and the same ids.
        ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", kind, "--vocab-size", "1200",
           "-o", f"{kind}_again.h5")
        with h5py.File(f"{kind}.h5", "r") as f, h5py.File(f"{kind}_again.h5", "r") as g:
            assert bytes(f["tokenizer/model"][:]) == bytes(g["tokenizer/model"][:]), "training is not reproducible"
            assert np.array_equal(f["tokens"][:], g["tokens"][:])
        # A whole-file document: newlines inside it go through byte fallback, and back.
        ok("prepare", "held.txt", "--tokenizer-model", f"{kind}.model", "-o", f"{kind}_whole.h5")
        assert_same_as_python(f"{kind}_whole.h5", ["\n\n\n".join(HELD_OUT)], sp)


@case
def tokenizer_model_trained_by_python():
    texts = corpus()
    held = held_out()
    # As Llama 2's tokenizer.model is made: BPE, byte fallback, digits split, no PAD piece.
    spm = python_sentencepiece()
    spm.SentencePieceTrainer.train(input="corpus.txt", model_prefix="py", model_type="bpe", vocab_size=900,
                                   byte_fallback=True, split_digits=True, normalization_rule_name="identity",
                                   remove_extra_whitespaces=False, unk_id=0, bos_id=1, eos_id=2, pad_id=-1,
                                   num_threads=1, minloglevel=2)
    sp = spm.SentencePieceProcessor(model_file="py.model")
    p = ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer-model", "py.model", "-o", "py.h5")
    assert "sentencepiece (bpe), vocab_size 900" in p.stdout and "pad 0" in p.stdout, p.stdout
    with h5py.File("py.h5", "r") as f:
        assert bytes(f["tokenizer/model"][:]) == open("py.model", "rb").read()
        # No PAD piece: padding uses unk (padding is never a target).
        assert f.attrs["pad_token_id"] == 0 and f.attrs["vocab_size"] == 900
    assert_same_as_python("py.h5", texts, sp)
    ok("prepare", "held.txt", "--separator", "\\n\\n\\n", "--tokenizer-model", "py.model", "-o", "held.h5")
    assert_same_as_python("held.h5", held, sp)
    assert_inspect_decodes("held.h5", held[0])
    # Held-out data with the tokenizer the training dataset holds: no .model file needed.
    p = ok("prepare", "held.txt", "--separator", "\\n\\n\\n", "--tokenizer-model", "py.h5", "-o", "held2.h5")
    assert "held by 'py.h5'" in p.stdout, p.stdout
    assert_same_as_python("held2.h5", held, sp)
    # A model without byte fallback is accepted with a warning; its ids are still Python's.
    spm.SentencePieceTrainer.train(input="corpus.txt", model_prefix="nofb", model_type="unigram",
                                   vocab_size=600, num_threads=1, minloglevel=2)
    p = ok("prepare", "held.txt", "--separator", "\\n\\n\\n", "--tokenizer-model", "nofb.model", "-o", "nofb.h5")
    assert "no byte fallback" in p.stdout, p.stdout
    nofb = spm.SentencePieceProcessor(model_file="nofb.model")
    for ids, text in zip(documents("nofb.h5"), held):
        assert ids == [nofb.bos_id()] + nofb.encode(text) + [nofb.eos_id()]


@case
def train_and_eval_on_a_sentencepiece_dataset():
    corpus()
    ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", "bpe", "--vocab-size", "800", "-o", "sp.h5")
    ok("init", "-o", "m.h5", "--preset", "tiny", "--vocab-size", "800")
    args = ["train", "--model", "m.h5", "--data", "sp.h5", "--seq-len", "256", "--steps", "4", "--lr", "3e-3",
            "--warmup-steps", "1", "--checkpoint-every", "2", "--block-q", "64", "--block-k", "64"]
    ok(*args, "--run-dir", "run")
    # Two ranks, each sequence split over them: the single rank's losses and the same tokenizer.
    ok("--oversubscribe", *args, "--run-dir", "cp2", "--cp", "2", ranks=2)
    one, two = timing("run")[0]["loss"], timing("cp2")[0]["loss"]
    rel = np.max(np.abs(two - one) / one)
    print(f"cp=2 on sentencepiece data: losses {two}, max rel diff to one rank {rel:.2e}")
    assert rel < 1e-5, (one, two)
    with h5py.File("run/checkpoints/step_00000004.h5", "r") as a, h5py.File("cp2/checkpoints/step_00000004.h5", "r") as b:
        assert bytes(a["tokenizer/model"][:]) == bytes(b["tokenizer/model"][:])
        assert dict(a["tokenizer"].attrs) == dict(b["tokenizer"].attrs)
    ckpt = "run/checkpoints/step_00000004.h5"
    with h5py.File(ckpt, "r") as c, h5py.File("sp.h5", "r") as d:
        assert bytes(c["tokenizer/model"][:]) == bytes(d["tokenizer/model"][:])
        assert c["tokenizer"].attrs["name"] == "sentencepiece" and c["tokenizer"].attrs["vocab_size"] == 800
        fingerprint = c["tokenizer"].attrs["fingerprint"]
    p = ok("inspect", ckpt, "--no-tensors")
    assert f"tokenizer: sentencepiece (bpe), vocab_size 800, fingerprint {fingerprint}" in p.stdout, p.stdout
    assert "first learned pieces:" in p.stdout, p.stdout
    p = ok("eval", "--model", ckpt, "--data", "sp.h5", "--seq-len", "256", "--max-sequences", "4")
    assert "mean loss" in p.stdout, p.stdout
    # Data of another tokenizer: eval, a fresh start and a resume from the checkpoint refuse it.
    ok("prepare", "corpus.txt", "--separator", "\\n\\n", "-o", "byte.h5")
    expect_error(["eval", "--model", ckpt, "--data", "byte.h5", "--seq-len", "256"], "byte.h5",
                 "trained with the tokenizer sentencepiece (bpe)", "byte, vocab_size 259")
    expect_error(["train", "--model", ckpt, "--data", "byte.h5", "--run-dir", "fresh", "--seq-len", "256",
                  "--steps", "2"], "trained with the tokenizer sentencepiece")
    listing = sorted(os.listdir("run/checkpoints"))
    expect_error(["train", "--model", "m.h5", "--data", "byte.h5", "--run-dir", "run", "--seq-len", "256",
                  "--steps", "6", "--lr", "3e-3", "--warmup-steps", "1", "--checkpoint-every", "2",
                  "--block-q", "64", "--block-k", "64", "--allow-data-change", "--resume", "auto"],
                 "trained with the tokenizer sentencepiece", "--data 'byte.h5'")
    assert sorted(os.listdir("run/checkpoints")) == listing
    # A model file from init, or a checkpoint from before /tokenizer, records no tokenizer: any
    # data that fits its vocabulary.
    ok("eval", "--model", "m.h5", "--data", "byte.h5", "--seq-len", "256", "--max-sequences", "2")
    os.system(f"cp {ckpt} old.h5")
    with h5py.File("old.h5", "r+") as f:
        del f["tokenizer"]
    ok("eval", "--model", "old.h5", "--data", "byte.h5", "--seq-len", "256", "--max-sequences", "2")
    assert "tokenizer: none recorded" in ok("inspect", "old.h5", "--no-tensors").stdout


@case
def bad_tokenizer_options_and_files():
    corpus()
    with open("t.txt", "w") as f:
        f.write("some text\n")
    cases = [
        (["--vocab-size", "1000"], "byte tokenizer's vocabulary is fixed"),
        (["--tokenizer", "bpe"], "give it"),
        (["--tokenizer", "unigram", "--vocab-size", "200"], "at least 261"),
        (["--tokenizer", "bpe", "--vocab-size", "500", "--tokenizer-model", "x.model"], "drop --tokenizer bpe"),
        (["--tokenizer-model", "x.model", "--vocab-size", "500"], "drop --vocab-size"),
    ]
    for extra, needle in cases:
        expect_error(["prepare", "corpus.txt", "-o", "o.h5", *extra], needle, code=2)
    expect_error(["prepare", "--synthetic", "passkey", "-o", "o.h5", "--tokenizer", "bpe", "--vocab-size", "500"],
                 "byte-tokenized", code=2)
    expect_error(["prepare", "t.txt", "-o", "o.h5", "--tokenizer-model", "t.txt"], "t.txt",
                 "is not a SentencePiece model")
    expect_error(["prepare", "t.txt", "-o", "o.h5", "--tokenizer-model", "missing.model"], "missing.model")
    expect_error(["prepare", "corpus.txt", "--separator", "\\n\\n", "-o", "o.h5", "--tokenizer", "unigram",
                  "--vocab-size", "500000"], "Vocabulary size too high")
    # A good dataset kept untouched when a bad prepare would replace it.
    expect_error(["prepare", "t.txt", "-o", "o.h5", "--tokenizer", "bpe", "--vocab-size", "261"],
                 "--vocab-size 261 cannot hold", "need 267", "raise --vocab-size above 267")
    ok("prepare", "t.txt", "-o", "tiny.h5")
    expect_error(["prepare", "t.txt", "-o", "o.h5", "--tokenizer-model", "tiny.h5"], "tiny.h5",
                 "holds no SentencePiece model", "--tokenizer byte")
    expect_error(["prepare", "t.txt", "-o", "tiny.h5", "--force", "--tokenizer-model", "t.txt"],
                 "not a SentencePiece model", keep=["tiny.h5"])
    # Damaged files: a model that is not one, a model swapped for another, attributes edited.
    ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", "bpe", "--vocab-size", "600", "-o", "d.h5")
    ok("prepare", "corpus.txt", "--separator", "\\n\\n", "--tokenizer", "bpe", "--vocab-size", "700", "-o", "e.h5")
    for name, edit, needle in [
        ("garbage", lambda f, g: f["tokenizer/model"].__setitem__(slice(0, 64), np.full(64, 0xFF, np.uint8)),
         "not a SentencePiece model"),
        ("swapped", lambda f, g: (f["tokenizer"].__delitem__("model"),
                                  f["tokenizer"].create_dataset("model", data=g["tokenizer/model"][:])),
         "disagree"),
        ("attrs", lambda f, g: f.attrs.__setitem__("eos_token_id", 5), "disagree"),
        ("missing", lambda f, g: f.__delitem__("tokenizer"), "no /tokenizer group"),
    ]:
        os.system(f"cp d.h5 {name}.h5")
        with h5py.File(f"{name}.h5", "r+") as f, h5py.File("e.h5", "r") as g:
            edit(f, g)
        expect_error(["inspect", f"{name}.h5"], f"{name}.h5", needle)


if __name__ == "__main__":
    sys.exit(cc.main())
