#!/usr/bin/python3
"""Independent float64 PyTorch reference for the architectures deepinfer runs.

Owns: a plain, readable forward pass written from the published Hugging Face
(modeling_llama / qwen2 / qwen3 / mistral / modeling_deepseek V2+V3) and
DeepSeek model definitions and vLLM's deepseek_mtp, used as the oracle for
the C model code. Its own safetensors reader (f32, f16, bf16, fp8-e4m3 with
128x128 `weight_scale_inv` block dequantisation) keeps it free of our C code
and of the pip `safetensors` package (not available here).

Why shaped so: everything in float64, no KV cache — each call runs the full
causal forward over the whole sequence, which is the simplest thing that can
be right. It is for tiny models only.

API:
  m = load(dir[, quantize=None|"bf16"|"int8"])   # quantize: round 2-D weights, to
                                                 # estimate quantised agreement
  m.logits(ids)      -> [len, vocab] float64
  m.hidden(ids)      -> [len, hidden] final hidden after the final RMSNorm
  m.mtp_logits(ids)  -> [len-1, vocab]: MTP depth 0; row i uses hidden(ids)[i]
                        and ids[i+1], predicts ids[i+2]
  m.greedy(ids, n)   -> n greedy continuation ids
"""

import json
import math
import os
import struct

import numpy as np
import torch

F64 = torch.float64

# --------------------------------------------------------------------------
# safetensors


def _fp8_e4m3_table():
    t = np.zeros(256, np.float64)
    for c in range(256):
        s, e, m = c >> 7, (c >> 3) & 15, c & 7
        if e == 15 and m == 7:
            v = float("nan")
        elif e == 0:
            v = m / 8.0 * 2.0**-6
        else:
            v = (1 + m / 8.0) * 2.0 ** (e - 7)
        t[c] = -v if s else v
    return t


FP8_E4M3 = _fp8_e4m3_table()


def read_safetensors_file(path):
    """name -> float64 numpy array (fp8 tensors as raw uint8 codes for now)."""
    out = {}
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    for name, info in header.items():
        if name == "__metadata__":
            continue
        a, b = info["data_offsets"]
        raw = data[a:b]
        shape = tuple(info["shape"])
        dt = info["dtype"]
        if dt == "F32":
            x = np.frombuffer(raw, "<f4").astype(np.float64)
        elif dt == "F16":
            x = np.frombuffer(raw, "<f2").astype(np.float64)
        elif dt == "BF16":
            x = (np.frombuffer(raw, "<u2").astype(np.uint32) << 16).view(np.float32).astype(np.float64)
        elif dt == "F64":
            x = np.frombuffer(raw, "<f8").astype(np.float64)
        elif dt == "F8_E4M3":
            x = FP8_E4M3[np.frombuffer(raw, np.uint8)]
        else:
            raise ValueError(f"{path}: tensor {name}: unsupported dtype {dt}")
        out[name] = x.reshape(shape)
    return out


def read_checkpoint(d):
    """All tensors of a checkpoint dir as float64 torch tensors, with fp8
    block scales applied: w[i, j] = fp8(w)[i, j] * scale_inv[i // 128, j // 128]."""
    idx = os.path.join(d, "model.safetensors.index.json")
    if os.path.exists(idx):
        files = sorted(set(json.load(open(idx))["weight_map"].values()))
    else:
        files = ["model.safetensors"]
    raw = {}
    for fn in files:
        raw.update(read_safetensors_file(os.path.join(d, fn)))
    out = {}
    for name, x in raw.items():
        if name.endswith("_scale_inv"):
            continue
        si = raw.get(name + "_scale_inv")
        if si is not None:
            r, c = x.shape
            full = np.repeat(np.repeat(si, 128, axis=0), 128, axis=1)[:r, :c]
            x = x * full
        out[name] = torch.from_numpy(np.ascontiguousarray(x))
    return out


# --------------------------------------------------------------------------
# building blocks


def rms_norm(x, w, eps):
    return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + eps) * w


def silu(x):
    return x * torch.sigmoid(x)


def mlp(x, W, p):
    return silu(x @ W[p + "gate_proj.weight"].T) * (x @ W[p + "up_proj.weight"].T) @ W[p + "down_proj.weight"].T


def attention(q, k, v, scale, window):
    """q [T,H,D], k [T,Hk,D], v [T,Hk,Dv]; head h uses kv head h // (H/Hk).
    Causal; with window, j is visible from i iff i - window < j <= i."""
    T, H, _ = q.shape
    g = H // k.shape[1]
    k = k.repeat_interleave(g, dim=1)
    v = v.repeat_interleave(g, dim=1)
    s = torch.einsum("ihd,jhd->hij", q, k) * scale
    i = torch.arange(T).unsqueeze(1)
    j = torch.arange(T).unsqueeze(0)
    vis = j <= i
    if window:
        vis = vis & (i - j < window)
    s = s.masked_fill(~vis, float("-inf"))
    p = torch.softmax(s, dim=-1)
    return torch.einsum("hij,jhd->ihd", p, v)


def rope_half(x, pos, inv_freq):
    """Llama-family rotate_half rope; x [T,H,D]."""
    f = pos.to(F64).unsqueeze(1) * inv_freq.unsqueeze(0)  # [T, D/2]
    emb = torch.cat([f, f], -1).unsqueeze(1)
    cos, sin = emb.cos(), emb.sin()
    d = x.shape[-1] // 2
    rot = torch.cat([-x[..., d:], x[..., :d]], -1)
    return x * cos + rot * sin


def rope_pairs(x, pos, inv_freq, mscale=1.0):
    """DeepSeek rope: adjacent pairs (x[2i], x[2i+1]) rotated as complex
    numbers by pos * inv_freq[i]; x [T,H,D]. Output stays interleaved."""
    f = pos.to(F64).unsqueeze(1) * inv_freq.unsqueeze(0)
    cos, sin = (f.cos() * mscale).unsqueeze(1), (f.sin() * mscale).unsqueeze(1)
    a, b = x[..., 0::2], x[..., 1::2]
    out = torch.empty_like(x)
    out[..., 0::2] = a * cos - b * sin
    out[..., 1::2] = a * sin + b * cos
    return out


def default_inv_freq(dim, base):
    return 1.0 / (base ** (torch.arange(0, dim, 2, dtype=F64) / dim))


def llama_inv_freq(cfg, dim):
    inv = default_inv_freq(dim, cfg.get("rope_theta", 10000.0))
    rs = cfg.get("rope_scaling")
    if not rs:
        return inv
    kind = rs.get("rope_type", rs.get("type"))
    if kind == "default":
        return inv
    if kind == "linear":
        return inv / rs["factor"]
    if kind == "llama3":
        factor, lo, hi = rs["factor"], rs["low_freq_factor"], rs["high_freq_factor"]
        old = rs["original_max_position_embeddings"]
        lo_wl, hi_wl = old / lo, old / hi
        wl = 2 * math.pi / inv
        out = torch.where(wl > lo_wl, inv / factor, inv)
        smooth = (old / wl - lo) / (hi - lo)
        smoothed = (1 - smooth) * out / factor + smooth * out
        medium = ~(wl < hi_wl) & ~(wl > lo_wl)
        return torch.where(medium, smoothed, out)
    raise ValueError(f"reference: rope_scaling type {kind!r} not supported for {cfg['model_type']}")


# YaRN as in HF modeling_deepseek.
def yarn_find_correction_dim(num_rot, dim, base, max_pos):
    return (dim * math.log(max_pos / (num_rot * 2 * math.pi))) / (2 * math.log(base))


def yarn_find_correction_range(low_rot, high_rot, dim, base, max_pos):
    low = math.floor(yarn_find_correction_dim(low_rot, dim, base, max_pos))
    high = math.ceil(yarn_find_correction_dim(high_rot, dim, base, max_pos))
    return max(low, 0), min(high, dim - 1)


def yarn_get_mscale(scale=1.0, mscale=1.0):
    if scale <= 1:
        return 1.0
    return 0.1 * mscale * math.log(scale) + 1.0


def yarn_linear_ramp_mask(lo, hi, dim):
    if lo == hi:
        hi += 0.001
    return torch.clamp((torch.arange(dim, dtype=F64) - lo) / (hi - lo), 0, 1)


def deepseek_rope(cfg):
    """(inv_freq, cos/sin mscale, softmax scale) for DeepSeek MLA."""
    dim = cfg["qk_rope_head_dim"]
    base = cfg.get("rope_theta", 10000.0)
    scale = (cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]) ** -0.5
    rs = cfg.get("rope_scaling")
    if not rs:
        return default_inv_freq(dim, base), 1.0, scale
    kind = rs.get("type", rs.get("rope_type"))
    factor = rs["factor"]
    mscale_all = rs.get("mscale_all_dim", 0)
    if mscale_all:
        m = yarn_get_mscale(factor, mscale_all)
        scale = scale * m * m
    if kind == "linear":
        return default_inv_freq(dim, base) / factor, 1.0, scale
    if kind != "yarn":
        raise ValueError(f"reference: DeepSeek rope_scaling type {kind!r} not supported")
    freq_extra = default_inv_freq(dim, base)
    freq_inter = 1.0 / (factor * base ** (torch.arange(0, dim, 2, dtype=F64) / dim))
    lo, hi = yarn_find_correction_range(
        rs.get("beta_fast", 32), rs.get("beta_slow", 1), dim, base, rs["original_max_position_embeddings"]
    )
    inv_freq_mask = 1.0 - yarn_linear_ramp_mask(lo, hi, dim // 2)
    inv_freq = freq_inter * (1 - inv_freq_mask) + freq_extra * inv_freq_mask
    ms = yarn_get_mscale(factor, rs.get("mscale", 1)) / yarn_get_mscale(factor, mscale_all)
    return inv_freq, ms, scale


# --------------------------------------------------------------------------
# model


class Model:
    def __init__(self, cfg, W):
        self.cfg, self.W = cfg, W
        self.mt = cfg["model_type"]
        self.ds = self.mt in ("deepseek_v2", "deepseek_v3")
        if self.mt not in ("llama", "qwen2", "qwen3", "mistral", "deepseek_v2", "deepseek_v3"):
            raise ValueError(f"reference: model_type {self.mt!r} not supported")
        if cfg.get("hidden_act", "silu") != "silu":
            raise ValueError("reference: only silu MLPs")
        self.L = cfg["num_hidden_layers"]
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        self.vocab = cfg["vocab_size"]
        if self.ds:
            self.inv_freq, self.mscale, self.softmax_scale = deepseek_rope(cfg)
        else:
            self.head_dim = cfg.get("head_dim") or cfg["hidden_size"] // cfg["num_attention_heads"]
            self.inv_freq = llama_inv_freq(cfg, self.head_dim)
            self.softmax_scale = self.head_dim**-0.5
        self.lm_head = W["model.embed_tokens.weight"] if cfg.get("tie_word_embeddings") else W["lm_head.weight"]
        # The rope layouts, as attributes so tests can swap them and show the
        # tiny models are sensitive to the layout.
        self.rope_gqa = rope_half
        self.rope_mla = rope_pairs

    # which layers slide
    def window(self, layer):
        c = self.cfg
        lt = c.get("layer_types")
        if lt is not None:
            if layer < len(lt) and lt[layer] == "sliding_attention":
                return c["sliding_window"]
            return None
        sw = c.get("sliding_window")
        if not sw:
            return None
        if self.mt == "mistral":
            return sw
        if self.mt in ("qwen2", "qwen3"):
            if c.get("use_sliding_window") and layer >= c.get("max_window_layers", 0):
                return sw
            return None
        return None

    def is_moe(self, layer):
        c = self.cfg
        return (
            bool(c.get("n_routed_experts"))
            and layer >= c.get("first_k_dense_replace", 0)
            and layer % c.get("moe_layer_freq", 1) == 0
        )

    # --- attention
    def attn_gqa(self, x, p, pos, window):
        c, W = self.cfg, self.W
        T = x.shape[0]
        nh, nkv, hd = c["num_attention_heads"], c.get("num_key_value_heads", c["num_attention_heads"]), self.head_dim

        def proj(n):
            y = x @ W[p + f"{n}_proj.weight"].T
            b = W.get(p + f"{n}_proj.bias")
            return y + b if b is not None else y

        q = proj("q").view(T, nh, hd)
        k = proj("k").view(T, nkv, hd)
        v = proj("v").view(T, nkv, hd)
        if self.mt == "qwen3":
            q = rms_norm(q, W[p + "q_norm.weight"], self.eps)
            k = rms_norm(k, W[p + "k_norm.weight"], self.eps)
        q = self.rope_gqa(q, pos, self.inv_freq)
        k = self.rope_gqa(k, pos, self.inv_freq)
        o = attention(q, k, v, self.softmax_scale, window).reshape(T, nh * hd)
        y = o @ W[p + "o_proj.weight"].T
        b = W.get(p + "o_proj.bias")
        return y + b if b is not None else y

    def attn_mla(self, x, p, pos, window):
        c, W = self.cfg, self.W
        T = x.shape[0]
        nh = c["num_attention_heads"]
        dn, dr, dv, kr = c["qk_nope_head_dim"], c["qk_rope_head_dim"], c["v_head_dim"], c["kv_lora_rank"]
        if c.get("q_lora_rank"):
            qa = rms_norm(x @ W[p + "q_a_proj.weight"].T, W[p + "q_a_layernorm.weight"], self.eps)
            q = qa @ W[p + "q_b_proj.weight"].T
        else:
            q = x @ W[p + "q_proj.weight"].T
        q = q.view(T, nh, dn + dr)
        q_nope, q_pe = q[..., :dn], q[..., dn:]
        ckv = x @ W[p + "kv_a_proj_with_mqa.weight"].T
        latent, k_pe = ckv[:, :kr], ckv[:, kr:].reshape(T, 1, dr)
        latent = rms_norm(latent, W[p + "kv_a_layernorm.weight"], self.eps)
        kv = (latent @ W[p + "kv_b_proj.weight"].T).view(T, nh, dn + dv)
        k_nope, v = kv[..., :dn], kv[..., dn:]
        q_pe = self.rope_mla(q_pe, pos, self.inv_freq, self.mscale)
        k_pe = self.rope_mla(k_pe, pos, self.inv_freq, self.mscale)
        qf = torch.cat([q_nope, q_pe], -1)
        kf = torch.cat([k_nope, k_pe.expand(T, nh, dr)], -1)
        o = attention(qf, kf, v, self.softmax_scale, window).reshape(T, nh * dv)
        return o @ W[p + "o_proj.weight"].T

    # --- MoE (HF modeling_deepseek MoEGate + DeepseekMoE)
    def route(self, x, p):
        c, W = self.cfg, self.W
        logits = x @ W[p + "gate.weight"].T  # [T, E]
        T, E = logits.shape
        top_k = c["num_experts_per_tok"]
        method = c.get("topk_method", "greedy")
        scoring = c.get("scoring_func", "softmax")
        if scoring == "softmax":
            scores = torch.softmax(logits, -1)
        elif scoring == "sigmoid":
            scores = torch.sigmoid(logits)
        else:
            raise ValueError(f"reference: scoring_func {scoring!r}")
        n_group, topk_group = c.get("n_group", 1) or 1, c.get("topk_group", 1) or 1
        if method == "greedy":
            w, idx = torch.topk(scores, top_k, -1)
        elif method == "group_limited_greedy":
            gs = scores.view(T, n_group, -1).max(-1).values
            gidx = torch.topk(gs, topk_group, -1).indices
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1)
            smask = gmask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, E)
            w, idx = torch.topk(scores.masked_fill(smask == 0, 0.0), top_k, -1)
        elif method == "noaux_tc":
            choice = scores + W[p + "gate.e_score_correction_bias"].unsqueeze(0)
            gs = choice.view(T, n_group, -1).topk(2, -1).values.sum(-1)
            gidx = torch.topk(gs, topk_group, -1).indices
            gmask = torch.zeros_like(gs).scatter_(1, gidx, 1)
            smask = gmask.unsqueeze(-1).expand(T, n_group, E // n_group).reshape(T, E)
            _, idx = torch.topk(choice.masked_fill(smask == 0, float("-inf")), top_k, -1)
            w = scores.gather(1, idx)
        else:
            raise ValueError(f"reference: topk_method {method!r}")
        rsf = c.get("routed_scaling_factor", 1.0)
        if self.mt == "deepseek_v3":
            if top_k > 1 and c.get("norm_topk_prob"):
                w = w / (w.sum(-1, keepdim=True) + 1e-20)
            w = w * rsf
        else:
            if top_k > 1 and c.get("norm_topk_prob"):
                w = w / (w.sum(-1, keepdim=True) + 1e-20)
            else:
                w = w * rsf
        return w, idx

    def moe(self, x, p):
        w, idx = self.route(x, p)
        y = torch.zeros_like(x)
        for t in range(x.shape[0]):
            for k in range(idx.shape[1]):
                e = int(idx[t, k])
                y[t] += w[t, k] * mlp(x[t : t + 1], self.W, p + f"experts.{e}.")[0]
        if self.cfg.get("n_shared_experts"):
            y = y + mlp(x, self.W, p + "shared_experts.")
        return y

    # --- layers
    def layer(self, h, i, pos):
        W, p = self.W, f"model.layers.{i}."
        x = rms_norm(h, W[p + "input_layernorm.weight"], self.eps)
        attn = self.attn_mla if self.ds else self.attn_gqa
        h = h + attn(x, p + "self_attn.", pos, self.window(i))
        x = rms_norm(h, W[p + "post_attention_layernorm.weight"], self.eps)
        if self.ds and self.is_moe(i):
            return h + self.moe(x, p + "mlp.")
        return h + mlp(x, W, p + "mlp.")

    def hidden(self, ids, final_norm=True):
        ids = torch.as_tensor(list(ids), dtype=torch.long)
        pos = torch.arange(len(ids))
        h = self.W["model.embed_tokens.weight"][ids]
        for i in range(self.L):
            h = self.layer(h, i, pos)
        return rms_norm(h, self.W["model.norm.weight"], self.eps) if final_norm else h

    def logits(self, ids):
        return self.hidden(ids) @ self.lm_head.T

    def mtp_logits(self, ids, depth=0, hidden=None):
        """hidden (default: self.hidden(ids)) exists so tests can build
        plausible wrong variants."""
        n = self.cfg.get("num_nextn_predict_layers") or 0
        if depth >= n:
            raise ValueError(f"reference: model has {n} MTP layers")
        if depth != 0:
            raise ValueError("reference: only MTP depth 0")
        ids = list(ids)
        W, li = self.W, self.L + depth
        p = f"model.layers.{li}."
        hid = (self.hidden(ids) if hidden is None else hidden)[:-1]  # position i: hidden_i with ids[i+1]
        emb = W.get(p + "embed_tokens.weight", W["model.embed_tokens.weight"])
        e = emb[torch.as_tensor(ids[1:], dtype=torch.long)]
        x = torch.cat([rms_norm(e, W[p + "enorm.weight"], self.eps), rms_norm(hid, W[p + "hnorm.weight"], self.eps)], -1)
        h = x @ W[p + "eh_proj.weight"].T
        h = self.layer(h, li, torch.arange(h.shape[0]))
        head = W.get(p + "shared_head.head.weight", self.lm_head)
        return rms_norm(h, W[p + "shared_head.norm.weight"], self.eps) @ head.T

    def greedy(self, ids, n):
        ids = list(ids)
        out = []
        for _ in range(n):
            nxt = int(torch.argmax(self.logits(ids + out)[-1]))
            out.append(nxt)
        return out


def _round_bf16(x):
    u = x.to(torch.float32).numpy().view(np.uint32)
    r = ((u.astype(np.uint64) + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint32) << 16
    return torch.from_numpy(r.view(np.float32).astype(np.float64))


def _round_int8(x):
    s = x.abs().amax(-1, keepdim=True) / 127.0
    s = torch.where(s == 0, torch.ones_like(s), s)
    return torch.round(x / s).clamp(-127, 127) * s


def load(d, quantize=None):
    cfg = json.load(open(os.path.join(d, "config.json")))
    W = read_checkpoint(d)
    if quantize:
        f = {"bf16": _round_bf16, "int8": _round_int8}[quantize]
        W = {k: (f(v) if v.dim() == 2 and not k.endswith("gate.weight") else v) for k, v in W.items()}
    return Model(cfg, W)


if __name__ == "__main__":
    import sys

    m = load(sys.argv[1])
    ids = [int(t) for t in sys.argv[2:]] or list(range(1, 17))
    lg = m.logits(ids)
    print("argmax per position:", lg.argmax(-1).tolist())
