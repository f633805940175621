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


def load_model(model_path, requires_grad=True):
    """The config attributes and the tensors of an lctrain model or checkpoint file."""
    with h5py.File(model_path, "r") as f:
        cfg = {k: f.attrs[k] for k in f.attrs}
        params = {k: torch.tensor(f[k][:], dtype=DT, requires_grad=requires_grad)
                  for k in f.keys() if k.endswith(".weight")}
    return cfg, params


def load(model_path, batch_path):
    cfg, params = load_model(model_path)
    with h5py.File(batch_path, "r") as f:
        batch = {k: torch.tensor(f[k][:].astype(np.int64)) for k in ["tokens", "targets", "doc", "idx", "pos"]}
        if "weights" in f:  # per-target loss weights (optional)
            batch["weights"] = torch.tensor(f["weights"][:], dtype=DT)
        opt = {k: f.attrs[k] for k in f.attrs}
    return cfg, params, batch, opt


def rope_inv_freq(cfg, D, seq_len):
    """Inverse frequencies [D/2] and the cos/sin factor of Hugging Face's rope_scaling
    (modeling_rope_utils: default, linear, dynamic, yarn, llama3), written out in float64 from
    the model file's flat rope_scaling.* attributes (absent = none)."""
    theta = float(cfg["rope_theta"])
    rs = lambda name, default: cfg.get("rope_scaling." + name, default)
    kind = rs("rope_type", "")
    kind = kind.decode() if isinstance(kind, bytes) else str(kind)
    i = torch.arange(0, D // 2, dtype=DT)
    plain = lambda base: base ** (-2.0 * i / D)
    inv = plain(theta)
    if kind in ("", "default"):
        return inv, 1.0
    factor = float(rs("factor", 1.0))
    max_pos = int(cfg["max_position_embeddings"])
    if kind == "linear":
        return inv / factor, 1.0
    if kind == "dynamic":  # the run's sequence length stands for Hugging Face's longest position + 1
        L = max(seq_len, max_pos)
        return plain(theta * ((factor * L / max_pos) - (factor - 1)) ** (D / (D - 2))), 1.0
    if kind == "llama3":
        old = float(rs("original_max_position_embeddings", 0))
        lo, hi = float(rs("low_freq_factor", 0)), float(rs("high_freq_factor", 0))
        wavelen = 2 * math.pi / inv
        smooth = (old / wavelen - lo) / (hi - lo)
        mid = (1 - smooth) * inv / factor + smooth * inv
        out = torch.where(wavelen > old / lo, inv / factor, mid)
        return torch.where(wavelen < old / hi, inv, out), 1.0
    if kind == "yarn":
        orig = int(rs("original_max_position_embeddings", 0)) or max_pos
        att = float(rs("attention_factor", 0.0))
        mscale, mscale_all = float(rs("mscale", 0.0)), float(rs("mscale_all_dim", 0.0))
        get_m = lambda s, m: 1.0 if s <= 1 else 0.1 * m * math.log(s) + 1.0
        if att <= 0:
            att = get_m(factor, mscale) / get_m(factor, mscale_all) if (mscale and mscale_all) else get_m(factor, 1.0)
        dim_of = lambda rot: D * math.log(orig / (rot * 2 * math.pi)) / (2 * math.log(theta))
        low, high = dim_of(float(rs("beta_fast", 32.0))), dim_of(float(rs("beta_slow", 1.0)))
        if bool(rs("truncate", True)):
            low, high = math.floor(low), math.ceil(high)
        low, high = max(low, 0), min(high, D - 1)
        if low == high:
            high += 0.001
        ramp = ((i - low) / (high - low)).clamp(0, 1)  # 1 = interpolated (divided by factor)
        return inv / factor * ramp + inv * (1 - ramp), att
    raise ValueError(f"unknown rope_scaling.rope_type {kind!r}")


def logits(cfg, P, b, seq_len):
    """[T, vocab] for the batch's tokens (doc, idx, pos as in lctrain's packed batches)."""
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
    inv_freq, att = rope_inv_freq(cfg, D, seq_len)
    ang = pos[:, None].to(DT) * inv_freq[None, :]
    cos, sin = torch.cat([ang.cos(), ang.cos()], -1)[:, None, :], torch.cat([ang.sin(), ang.sin()], -1)[:, None, :]
    cos, sin = cos * att, sin * att  # Hugging Face multiplies both by attention_scaling

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
    return rms(x, P["model.norm.weight"]) @ lm_head.T


def loss_sum(cfg, P, b, seq_len):
    z = logits(cfg, P, b, seq_len)
    if "weights" not in b:
        return F.cross_entropy(z, b["targets"], ignore_index=-1, reduction="sum")
    per_target = F.cross_entropy(z, b["targets"], ignore_index=-1, reduction="none")  # 0 where ignored
    return (per_target * b["weights"]).sum()


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
    # the normalisation: the scored targets' count, or the sum of their weights
    valid = float(b["weights"][b["targets"] >= 0].sum()) if "weights" in b else int((b["targets"] >= 0).sum())
    seq_len = int(o.get("seq_len", int(b["pos"].max()) + 1))  # what the run's RoPE table spans

    loss = loss_sum(cfg, P, b, seq_len) / valid
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
        l = loss_sum(cfg, P, b, seq_len) / valid
        l.backward()
        norms.append(float(torch.nn.utils.clip_grad_norm_(list(P.values()), float(o["grad_clip"]))))
        for g in opt.param_groups:
            g["lr"] = lr_at(o, step)
        opt.step()
        losses.append(l.item())
    with torch.no_grad():
        losses.append((loss_sum(cfg, P, b, seq_len) / valid).item())  # after the last update
    out["step_losses"] = np.array(losses)
    out["step_grad_norms"] = np.array(norms)
    with h5py.File(a.out, "w") as f:
        for k, v in out.items():
            f[k] = v
    print(f"torch reference: loss {loss.item():.8f} over {valid} targets; step losses {losses}")


if __name__ == "__main__":
    main()
