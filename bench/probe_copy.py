#!/usr/bin/python3
"""Which copy circuit has a model learnt? Copy accuracy of lctrain models or checkpoints on
copy documents with 0, 1 and 2 random words between the two copies of each string.

  /usr/bin/python3 bench/probe_copy.py RUN/copy/checkpoints/step_00000500.h5 [MORE.h5 ...]

A model that copies by content (it finds the first copy from the symbols it has just read:
an induction head) scores alike whatever stands between the copies. One that copies "the
previous word" by position scores on adjacent copies only: the second copy of
`lctrain prepare --synthetic copy` ("S S. ") follows the first directly, so a model can learn
either from it. Scored: each symbol of a second copy after its first, teacher-forced, greedy.
The documents are drawn as `prepare --synthetic copy` draws its strings (4 to 12 distinct
symbols of a-z0-9); each inserted word has 3 to 6 symbols that its string does not hold.
The forward pass is the golden tests' PyTorch reference (tests/golden/torch_reference.py).
Needs python3-torch and python3-h5py (Debian).
"""
import argparse
import os
import random
import sys

import h5py
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "golden"))
import torch_reference as ref  # noqa: E402

SYMBOLS = "abcdefghijklmnopqrstuvwxyz0123456789"
BOS = 256


def document(rng, words_between, length):
    """Text of `length` bytes of pairs "S w.. S. " and the byte offsets of the scored symbols."""
    text, scored = "", []
    while len(text) < length:
        s = "".join(rng.sample(SYMBOLS, rng.randint(4, 12)))
        text += s + " "
        for _ in range(words_between):
            other = [c for c in SYMBOLS if c not in s]
            text += "".join(rng.sample(other, rng.randint(3, 6))) + " "
        scored += [len(text) + i for i in range(1, len(s))]
        text += s + ". "
    return text[:length], [a for a in scored if a < length]


def copy_accuracy(cfg, P, words_between, docs, seed, length=254):
    rng = random.Random(seed)
    right = total = 0
    for _ in range(docs):
        text, scored = document(rng, words_between, length)
        tok = torch.tensor([BOS] + list(text.encode()))
        T = tok.shape[0]
        batch = {"tokens": tok, "doc": torch.zeros(T, dtype=torch.int64),
                 "idx": torch.arange(T), "pos": torch.arange(T)}
        with torch.no_grad():
            pred = ref.logits(cfg, P, batch, T).argmax(-1)
        # byte a of the text is token a + 1, predicted at position a
        right += sum(int(pred[a] == tok[a + 1]) for a in scored)
        total += len(scored)
    return right / total


def check_model_file(path):
    """Exits with one line unless `path` is an lctrain model or checkpoint file."""
    if not os.path.exists(path):
        sys.exit(f"probe_copy: '{path}' does not exist (give lctrain model or checkpoint files)")
    try:
        with h5py.File(path, "r") as f:
            kind = f.attrs.get("lctrain_file", "")
    except OSError:
        kind = "not HDF5"
    if kind not in ("model", "checkpoint"):
        sys.exit(f"probe_copy: '{path}' is not an lctrain model or checkpoint (lctrain_file: {kind or 'none'})")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("models", nargs="+", help="lctrain model or checkpoint files")
    ap.add_argument("--docs", type=int, default=20, help="documents of 256 tokens per setting")
    ap.add_argument("--seed", type=int, default=7)
    a = ap.parse_args()
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    for path in a.models:  # every file checked before any work
        check_model_file(path)
    print(f"copy accuracy (second copies after their first symbol), {a.docs} documents of 256 tokens each")
    print(f"{'words between the copies':>26}      0      1      2   model")
    for path in a.models:
        cfg, P = ref.load_model(path, requires_grad=False)
        acc = [copy_accuracy(cfg, P, k, a.docs, a.seed) for k in (0, 1, 2)]
        print(f"{'':>26} " + " ".join(f"{x:6.1%}" for x in acc) + f"   {path}")


if __name__ == "__main__":
    main()
