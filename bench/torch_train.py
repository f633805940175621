#!/usr/bin/python3
"""The PyTorch side of the end-to-end benchmark: the same Llama model (weights read from an
lctrain model file) trained with AdamW on the same passkey data, the way Hugging Face's
LlamaForCausalLM computes it in PyTorch 1.13 (eager attention: [heads, S, S] scores; 1.13
has no scaled_dot_product_attention), float32, on --threads threads.

Prints one line per step and a final line
  torch: seq_len S  tokens/s T (median of steps 2..n)  peak_rss_gib R  status ok|oom
An address-space limit (--mem-gib) turns running out of memory into status oom instead of
the kernel's OOM killer.
"""
import argparse
import math
import resource
import statistics
import sys
import time

import h5py
import numpy as np
import torch
import torch.nn.functional as F


def peak_rss_gib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--mem-gib", type=float, default=20.0)
    a = ap.parse_args()
    lim = int(a.mem_gib * 2**30)
    resource.setrlimit(resource.RLIMIT_AS, (lim, lim))
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)

    with h5py.File(a.model, "r") as f:
        cfg = {k: f.attrs[k] for k in f.attrs}
        P = {k: torch.tensor(f[k][:], requires_grad=True) for k in f.keys() if k.endswith(".weight")}
    C, H, KV = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    D, L, eps = C // H, int(cfg["num_hidden_layers"]), float(cfg["rms_norm_eps"])
    S = a.seq_len
    with h5py.File(a.data, "r") as f:
        tokens = torch.tensor(f["tokens"][: (a.steps + 1) * S + 1].astype(np.int64))

    inv_freq = 1.0 / (float(cfg["rope_theta"]) ** (torch.arange(0, D, 2).float() / D))
    ang = torch.arange(S).float()[:, None] * inv_freq[None, :]
    cos = torch.cat([ang.cos(), ang.cos()], -1)[None]
    sin = torch.cat([ang.sin(), ang.sin()], -1)[None]
    causal = torch.full((S, S), float("-inf")).triu(1)

    def rope(x):  # [heads, S, D]
        return x * cos + torch.cat([-x[..., D // 2:], x[..., : D // 2]], -1) * sin

    def rms(x, w):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w

    def loss_of(inp, tgt):
        x = P["model.embed_tokens.weight"][inp]
        for l in range(L):
            p = f"model.layers.{l}."
            h = rms(x, P[p + "input_layernorm.weight"])
            q = rope((h @ P[p + "self_attn.q_proj.weight"].T).view(S, H, D).transpose(0, 1))
            k = rope((h @ P[p + "self_attn.k_proj.weight"].T).view(S, KV, D).transpose(0, 1))
            v = (h @ P[p + "self_attn.v_proj.weight"].T).view(S, KV, D).transpose(0, 1)
            k, v = k.repeat_interleave(H // KV, 0), v.repeat_interleave(H // KV, 0)
            s = q @ k.transpose(1, 2) / math.sqrt(D) + causal
            o = (torch.softmax(s, -1) @ v).transpose(0, 1).reshape(S, C)
            x = x + o @ P[p + "self_attn.o_proj.weight"].T
            h = rms(x, P[p + "post_attention_layernorm.weight"])
            x = x + (F.silu(h @ P[p + "mlp.gate_proj.weight"].T) * (h @ P[p + "mlp.up_proj.weight"].T)) @ P[p + "mlp.down_proj.weight"].T
        head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]
        return F.cross_entropy(rms(x, P["model.norm.weight"]) @ head.T, tgt)

    opt = torch.optim.AdamW(P.values(), lr=1e-3, betas=(0.9, 0.95), weight_decay=0.1)
    times, status = [], "ok"
    try:
        for step in range(a.steps):
            inp, tgt = tokens[step * S:(step + 1) * S], tokens[step * S + 1:(step + 1) * S + 1]
            t0 = time.perf_counter()
            opt.zero_grad()
            loss = loss_of(inp, tgt)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(P.values(), 1.0)
            opt.step()
            dt = time.perf_counter() - t0
            times.append(dt)
            print(f"torch step {step + 1}: loss {loss.item():.4f}  {dt:.2f} s  {S / dt:.0f} tok/s", flush=True)
    except (RuntimeError, MemoryError) as e:
        status = "oom"
        print(f"torch: out of memory at seq_len {S}: {str(e)[:120]}", flush=True)
    tps = S / statistics.median(times[1:] if len(times) > 1 else times) if times else 0.0
    print(f"torch: seq_len {S}  tokens/s {tps:.1f}  peak_rss_gib {peak_rss_gib():.2f}  status {status}")
    return 0 if status == "ok" else 3


if __name__ == "__main__":
    sys.exit(main())
