#!/usr/bin/python3
"""Independent reference for lctrain's model: the Hugging Face Llama computation written
out in PyTorch (float64), gradients by autograd, optimiser torch.optim.AdamW with
torch.nn.utils.clip_grad_norm_.

Reads an lctrain model file and a batch file (tokens, targets, doc, idx, pos as [T] and the
optimiser settings as attributes), writes loss, every parameter gradient (under grad/NAME)
and the losses and gradient norms of `steps` AdamW steps on the same batch.
"""
import argparse
import math

import h5py
import numpy as np
import torch
import torch.nn.functional as F

torch.set_num_threads(2)
DT = torch.float64


def load(model_path, batch_path):
    with h5py.File(model_path, "r") as f:
        cfg = {k: f.attrs[k] for k in f.attrs}
        params = {k: torch.tensor(f[k][:], dtype=DT, requires_grad=True)
                  for k in f.keys() if k.endswith(".weight")}
    with h5py.File(batch_path, "r") as f:
        batch = {k: torch.tensor(f[k][:].astype(np.int64)) for k in ["tokens", "targets", "doc", "idx", "pos"]}
        opt = {k: f.attrs[k] for k in f.attrs}
    return cfg, params, batch, opt


def loss_sum(cfg, P, b):
    C, H, KV = int(cfg["hidden_size"]), int(cfg["num_attention_heads"]), int(cfg["num_key_value_heads"])
    D, eps, L = C // H, float(cfg["rms_norm_eps"]), int(cfg["num_hidden_layers"])
    tok, doc, idx, pos = b["tokens"], b["doc"], b["idx"], b["pos"]
    T = tok.shape[0]
    lm_head = P["model.embed_tokens.weight"] if cfg["tie_word_embeddings"] else P["lm_head.weight"]

    # causal within a document; padding rows (doc -1) see only themselves so softmax has no
    # empty row: they feed nothing and are scored nowhere, so loss and gradients are unaffected
    mask = (doc[:, None] == doc[None, :]) & (doc[:, None] >= 0) & (idx[None, :] <= idx[:, None])
    window = int(cfg.get("sliding_window", 0))  # Hugging Face: kv_idx > q_idx - sliding_window
    if window > 0:
        mask = mask & (idx[None, :] > idx[:, None] - window)
    mask = mask | (torch.eye(T, dtype=torch.bool) & (doc[:, None] < 0))
    inv_freq = 1.0 / (float(cfg["rope_theta"]) ** (torch.arange(0, D, 2, dtype=DT) / D))
    ang = pos[:, None].to(DT) * inv_freq[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :], torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]

    def rope(x):  # [T, heads, D], Hugging Face rotate_half
        x1, x2 = x[..., : D // 2], x[..., D // 2:]
        return x * cos + torch.cat([-x2, x1], -1) * sin

    def rms(x, w):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w

    x = P["model.embed_tokens.weight"][tok]
    for l in range(L):
        p = f"model.layers.{l}."
        h = rms(x, P[p + "input_layernorm.weight"])
        q = rope((h @ P[p + "self_attn.q_proj.weight"].T).view(T, H, D))
        k = rope((h @ P[p + "self_attn.k_proj.weight"].T).view(T, KV, D)).repeat_interleave(H // KV, 1)
        v = (h @ P[p + "self_attn.v_proj.weight"].T).view(T, KV, D).repeat_interleave(H // KV, 1)
        s = torch.einsum("ihd,jhd->hij", q, k) / math.sqrt(D)
        s = torch.where(mask[None], s, torch.tensor(float("-inf"), dtype=DT))
        o = torch.einsum("hij,jhd->ihd", torch.softmax(s, -1), v).reshape(T, H * D)
        x = x + o @ P[p + "self_attn.o_proj.weight"].T
        h = rms(x, P[p + "post_attention_layernorm.weight"])
        x = x + (F.silu(h @ P[p + "mlp.gate_proj.weight"].T) * (h @ P[p + "mlp.up_proj.weight"].T)) @ P[p + "mlp.down_proj.weight"].T
    logits = rms(x, P["model.norm.weight"]) @ lm_head.T
    return F.cross_entropy(logits, b["targets"], ignore_index=-1, reduction="sum")


def lr_at(o, step):
    lr, min_lr, warm, total = float(o["lr"]), float(o["min_lr"]), int(o["warmup_steps"]), int(o["total_steps"])
    if warm > 0 and step <= warm:
        return lr * step / warm
    progress = min(1.0, (step - warm) / max(1, total - warm))
    return min_lr + 0.5 * (lr - min_lr) * (1 + math.cos(math.pi * progress))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--batch", required=True)
    ap.add_argument("--out", required=True)
    a = ap.parse_args()
    cfg, P, b, o = load(a.model, a.batch)
    valid = int((b["targets"] >= 0).sum())

    loss = loss_sum(cfg, P, b) / valid
    loss.backward()
    out = {"loss": np.array([loss.item()]), "valid_targets": np.array([valid], dtype=np.float64)}
    for k, t in P.items():
        out["grad/" + k] = t.grad.detach().clone().numpy()  # numpy() would alias the live grad

    decay = [t for k, t in P.items() if k.endswith("proj.weight") or k == "lm_head.weight"]
    other = [t for k, t in P.items() if not (k.endswith("proj.weight") or k == "lm_head.weight")]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": float(o["weight_decay"])},
                             {"params": other, "weight_decay": 0.0}],
                            lr=float(o["lr"]), betas=(float(o["beta1"]), float(o["beta2"])), eps=float(o["eps"]))
    losses, norms = [], []
    for step in range(1, int(o["steps"]) + 1):
        opt.zero_grad()
        l = loss_sum(cfg, P, b) / valid
        l.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(P.values()), float(o["grad_clip"]))))
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step)
        opt.step()
        losses.append(l.item())
    with torch.no_grad():
        losses.append((loss_sum(cfg, P, b) / valid).item())  # after the last update
    out["step_losses"] = np.array(losses)
    out["step_grad_norms"] = np.array(norms)
    with h5py.File(a.out, "w") as f:
        for k, v in out.items():
            f[k] = v
    print(f"torch reference: loss {loss.item():.8f} over {valid} targets; step losses {losses}")


if __name__ == "__main__":
    main()
