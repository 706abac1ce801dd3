"""Training twin of tools/reference.py's DeepSeek-V3 model, and its export.

Owns: a torch nn.Module (f32, batched, autograd) computing exactly what
reference.Model computes for model_type deepseek_v3 -- MLA with interleaved
rope pairs (reference.rope_pairs, reference.deepseek_rope), sliding-window
layers from `layer_types`, DeepSeekMoE with sigmoid scores, the
e_score_correction_bias used only for choosing experts (noaux_tc),
normalised top-k weights times routed_scaling_factor, a shared expert, and
the MTP layer on the final-normed hidden -- plus a KV-cached single-sequence
decode for evaluation, and writing the checkpoint in the HF layout that
tools/make_model.py writes (same config fields, tensor names, safetensors
writer) so build/deepinfer loads it.

Why shaped so: the module tree mirrors the HF names (model.layers.N.self_attn
.kv_b_proj ...), so state_dict() keys are the checkpoint's tensor names with
no mapping table; the MTP layer's embed_tokens / shared_head.head are tied to
the main embedding / lm_head as in DeepSeek-V3 and written out as copies.
verify_against_reference() checks the twin on an exported checkpoint.
"""

import json
import math
import os
import sys

import torch
import torch.nn as nn
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, ".."))
import make_model  # noqa: E402
import reference as R  # noqa: E402


def make_config(vocab_size, bos, eos, hidden=192, layers=4, n_sliding=2, window=128, heads=4, experts=8,
                moe_inter=192, dense_inter=512, kv_lora=64, nope=32, rope=16, v_dim=32, max_pos=4096):
    cfg = make_model._deepseek(
        "deepseek_v3",
        "DeepseekV3ForCausalLM",
        vocab_size=vocab_size,
        hidden_size=hidden,
        intermediate_size=dense_inter,
        moe_intermediate_size=moe_inter,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        n_shared_experts=1,
        n_routed_experts=experts,
        num_experts_per_tok=2,
        first_k_dense_replace=1,
        q_lora_rank=None,
        kv_lora_rank=kv_lora,
        qk_nope_head_dim=nope,
        qk_rope_head_dim=rope,
        v_head_dim=v_dim,
        n_group=1,
        topk_group=1,
        topk_method="noaux_tc",
        scoring_func="sigmoid",
        norm_topk_prob=True,
        routed_scaling_factor=1.0,
        num_nextn_predict_layers=1,
        rope_scaling=None,
        max_position_embeddings=max_pos,
        sliding_window=window,
        layer_types=["sliding_attention"] * n_sliding + ["full_attention"] * (layers - n_sliding),
        aux_loss_alpha=0.0,
    )
    cfg.update(bos_token_id=bos, eos_token_id=eos, torch_dtype="bfloat16", transformers_version="4.46.0")
    return cfg


class Norm(nn.Module):
    def __init__(self, n, eps):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(n))
        self.eps = eps

    def forward(self, x):
        return x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps) * self.weight


def lin(i, o):
    return nn.Linear(i, o, bias=False)


class MLP(nn.Module):
    def __init__(self, h, inter):
        super().__init__()
        self.gate_proj, self.up_proj, self.down_proj = lin(h, inter), lin(h, inter), lin(inter, h)

    def forward(self, x):
        return self.down_proj(F.silu(self.gate_proj(x)) * self.up_proj(x))


def rope_pairs(x, cos, sin):
    """x [..., T, H, D] interleaved pairs; cos/sin [T, 1, D/2]."""
    a, b = x[..., 0::2], x[..., 1::2]
    return torch.stack([a * cos - b * sin, a * sin + b * cos], -1).flatten(-2)


class MLA(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, nh = cfg["hidden_size"], cfg["num_attention_heads"]
        self.nh, self.dn, self.dr, self.dv = nh, cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
        self.kr = cfg["kv_lora_rank"]
        self.q_proj = lin(h, nh * (self.dn + self.dr))
        self.kv_a_proj_with_mqa = lin(h, self.kr + self.dr)
        self.kv_a_layernorm = Norm(self.kr, cfg["rms_norm_eps"])
        self.kv_b_proj = lin(self.kr, nh * (self.dn + self.dv))
        self.o_proj = lin(nh * self.dv, h)
        inv, ms, self.scale = R.deepseek_rope(cfg)
        self.register_buffer("inv_freq", inv.float(), persistent=False)
        self.mscale = ms

    def qkv(self, x, pos):
        B, T, _ = x.shape
        q = self.q_proj(x).view(B, T, self.nh, self.dn + self.dr)
        ckv = self.kv_a_proj_with_mqa(x)
        latent, k_pe = ckv[..., : self.kr], ckv[..., self.kr:].reshape(B, T, 1, self.dr)
        kv = self.kv_b_proj(self.kv_a_layernorm(latent)).view(B, T, self.nh, self.dn + self.dv)
        f = pos.float().unsqueeze(1) * self.inv_freq.unsqueeze(0)
        cos, sin = (f.cos() * self.mscale).unsqueeze(1), (f.sin() * self.mscale).unsqueeze(1)
        q = torch.cat([q[..., : self.dn], rope_pairs(q[..., self.dn:], cos, sin)], -1)
        k_pe = rope_pairs(k_pe, cos, sin).expand(B, T, self.nh, self.dr)
        k = torch.cat([kv[..., : self.dn], k_pe], -1)
        return q, k, kv[..., self.dn:]

    def forward(self, x, pos, window, cache=None):
        """cache: None (training: causal over x) or a dict holding k, v, pos
        of earlier positions (decode); x then has positions `pos`."""
        B, T, _ = x.shape
        q, k, v = self.qkv(x, pos)
        kpos = pos
        if cache is not None:
            if "k" in cache:
                k = torch.cat([cache["k"], k], 1)
                v = torch.cat([cache["v"], v], 1)
                kpos = torch.cat([cache["pos"], pos])
            cache["k"], cache["v"], cache["pos"] = k, v, kpos
        s = torch.einsum("bihd,bjhd->bhij", q, k) * self.scale
        i, j = pos.unsqueeze(1), kpos.unsqueeze(0)
        vis = j <= i
        if window:
            vis = vis & (i - j < window)
        s = s.masked_fill(~vis, float("-inf"))
        o = torch.einsum("bhij,bjhd->bihd", torch.softmax(s, -1), v).reshape(B, T, self.nh * self.dv)
        return self.o_proj(o)


class Gate(nn.Module):
    def __init__(self, h, ne):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(ne, h))
        nn.init.normal_(self.weight, std=1 / math.sqrt(h))
        self.register_buffer("e_score_correction_bias", torch.zeros(ne))


class MoE(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        h, ne, mi = cfg["hidden_size"], cfg["n_routed_experts"], cfg["moe_intermediate_size"]
        self.k, self.rsf = cfg["num_experts_per_tok"], cfg["routed_scaling_factor"]
        self.gate = Gate(h, ne)
        self.experts = nn.ModuleList(MLP(h, mi) for _ in range(ne))
        self.shared_experts = MLP(h, mi * cfg["n_shared_experts"])
        self.last_load = None  # tokens per expert in the last forward (for the bias update)

    def forward(self, x):
        shp = x.shape
        x2 = x.reshape(-1, shp[-1])
        scores = torch.sigmoid(x2 @ self.gate.weight.t())
        choice = scores.detach() + self.gate.e_score_correction_bias
        idx = torch.topk(choice, self.k, -1).indices
        w = scores.gather(1, idx)
        w = w / (w.sum(-1, keepdim=True) + 1e-20) * self.rsf
        y = torch.zeros_like(x2)
        ne = len(self.experts)
        flat = idx.reshape(-1)
        self.last_load = torch.bincount(flat, minlength=ne).detach()
        tok = torch.arange(x2.shape[0]).repeat_interleave(self.k)
        wf = w.reshape(-1)
        order = torch.argsort(flat, stable=True)
        counts = self.last_load.tolist()
        start = 0
        for e in range(ne):
            n = counts[e]
            if n:
                sel = order[start:start + n]
                t = tok[sel]
                y.index_add_(0, t, self.experts[e](x2[t]) * wf[sel].unsqueeze(1))
            start += n
        return (y + self.shared_experts(x2)).reshape(shp)


class Layer(nn.Module):
    def __init__(self, cfg, i):
        super().__init__()
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.input_layernorm = Norm(h, eps)
        self.self_attn = MLA(cfg)
        self.post_attention_layernorm = Norm(h, eps)
        moe = i >= cfg["first_k_dense_replace"]
        self.mlp = MoE(cfg) if moe else MLP(h, cfg["intermediate_size"])
        lt = cfg.get("layer_types")
        self.window = cfg["sliding_window"] if lt and i < len(lt) and lt[i] == "sliding_attention" else None

    def forward(self, h, pos, cache=None):
        h = h + self.self_attn(self.input_layernorm(h), pos, self.window, cache)
        return h + self.mlp(self.post_attention_layernorm(h))


class MTPLayer(Layer):
    """model.layers.L: a decoder layer plus enorm/hnorm/eh_proj and shared_head.norm.
    embed_tokens and shared_head.head are the main model's (tied)."""

    def __init__(self, cfg, i):
        super().__init__(cfg, i)
        h, eps = cfg["hidden_size"], cfg["rms_norm_eps"]
        self.enorm, self.hnorm = Norm(h, eps), Norm(h, eps)
        self.eh_proj = lin(2 * h, h)
        self.shared_head = nn.Module()
        self.shared_head.norm = Norm(h, eps)


class Inner(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.embed_tokens = nn.Embedding(cfg["vocab_size"], cfg["hidden_size"])
        L = cfg["num_hidden_layers"]
        layers = [Layer(cfg, i) for i in range(L)]
        layers += [MTPLayer(cfg, L + d) for d in range(cfg.get("num_nextn_predict_layers") or 0)]
        self.layers = nn.ModuleList(layers)
        self.norm = Norm(cfg["hidden_size"], cfg["rms_norm_eps"])


class Model(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.L = cfg["num_hidden_layers"]
        self.model = Inner(cfg)
        self.lm_head = lin(cfg["hidden_size"], cfg["vocab_size"])
        self.init_weights()

    def init_weights(self, std=0.02):
        n_res = 2 * (self.L + 1)
        for name, p in self.named_parameters():
            if name.endswith("norm.weight") or name.endswith("layernorm.weight"):
                nn.init.ones_(p)
            elif name.endswith("gate.weight"):
                nn.init.normal_(p, std=std)
            elif name.endswith("o_proj.weight") or name.endswith("down_proj.weight"):
                nn.init.normal_(p, std=std / math.sqrt(n_res))
            else:
                nn.init.normal_(p, std=std)

    def moe_layers(self):
        return [l.mlp for l in self.model.layers if isinstance(l.mlp, MoE)]

    def forward(self, ids, mtp=True):
        """ids [B, T] -> (main logits [B, T, V], MTP logits [B, T-1, V] or None).
        MTP row i uses the final-normed hidden at i and ids[:, i+1], predicts ids[:, i+2]."""
        B, T = ids.shape
        pos = torch.arange(T)
        emb = self.model.embed_tokens(ids)
        h = emb
        for layer in self.model.layers[: self.L]:
            h = layer(h, pos)
        hn = self.model.norm(h)
        logits = self.lm_head(hn)
        if not mtp or len(self.model.layers) == self.L:
            return logits, None
        m = self.model.layers[self.L]
        x = torch.cat([m.enorm(emb[:, 1:]), m.hnorm(hn[:, :-1])], -1)
        g = m(m.eh_proj(x), pos[: T - 1])
        return logits, self.lm_head(m.shared_head.norm(g))

    @torch.no_grad()
    def generate(self, ids, n, stop=None):
        """Greedy, KV-cached, one sequence; stops after a token in `stop`."""
        caches = [dict() for _ in range(self.L)]
        out = []
        x = torch.tensor([list(ids)])
        p0 = 0
        for _ in range(n):
            pos = torch.arange(p0, p0 + x.shape[1])
            h = self.model.embed_tokens(x)
            for layer, c in zip(self.model.layers[: self.L], caches):
                h = layer(h, pos, c)
            nxt = int(self.lm_head(self.model.norm(h[:, -1])).argmax(-1))
            out.append(nxt)
            p0 += x.shape[1]
            if stop and nxt in stop:
                break
            x = torch.tensor([[nxt]])
        return out

    # --- export
    def hf_state(self):
        """name -> f32 tensor, in make_model.tensor_list order, MTP ties written out."""
        sd = {k: v.detach().float() for k, v in self.state_dict().items()}
        for d in range(self.cfg.get("num_nextn_predict_layers") or 0):
            p = f"model.layers.{self.L + d}."
            sd[p + "embed_tokens.weight"] = sd["model.embed_tokens.weight"]
            sd[p + "shared_head.head.weight"] = sd["lm_head.weight"]
        names = [n for n, *_ in make_model.tensor_list(self.cfg)]
        missing = [n for n in names if n not in sd]
        extra = [n for n in sd if n not in names]
        if missing or extra:
            raise RuntimeError(f"twin/HF name mismatch: missing {missing[:4]} extra {extra[:4]}")
        return {n: sd[n] for n in names}

    def load_hf(self, W):
        """Loads from reference.read_checkpoint's dict (float64 tensors)."""
        sd = self.state_dict()
        for k in sd:
            sd[k].copy_(W[k].to(sd[k].dtype))


def write_checkpoint(model, out_dir, dtype="bf16", meta=None):
    """config.json, generation_config.json and model.safetensors (bf16, with
    e_score_correction_bias kept in f32 as DeepSeek-V3 ships it)."""
    os.makedirs(out_dir, exist_ok=True)
    cfg = dict(model.cfg)
    cfg["torch_dtype"] = {"bf16": "bfloat16", "f32": "float32"}[dtype]
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(cfg, f, indent=2)
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": cfg["bos_token_id"], "eos_token_id": cfg["eos_token_id"], "do_sample": False,
                   "temperature": 0.0}, f, indent=2)
    header = {"__metadata__": dict({"format": "pt"}, **(meta or {}))}
    blobs, off = [], 0
    for name, t in model.hf_state().items():
        x = t.contiguous().numpy()
        if dtype == "f32" or name.endswith("e_score_correction_bias"):
            b, st = x.astype("<f4").tobytes(), "F32"
        else:
            b, st = make_model.to_bf16(x).astype("<u2").tobytes(), "BF16"
        header[name] = {"dtype": st, "shape": list(x.shape), "data_offsets": [off, off + len(b)]}
        blobs.append(b)
        off += len(b)
    hb = json.dumps(header, separators=(",", ":")).encode()
    hb += b" " * ((8 - len(hb) % 8) % 8)
    path = os.path.join(out_dir, "model.safetensors")
    with open(path + ".tmp", "wb") as f:
        f.write(len(hb).to_bytes(8, "little"))
        f.write(hb)
        for b in blobs:
            f.write(b)
    os.replace(path + ".tmp", path)


def n_params(cfg, unique=True):
    """Parameter count as stored (unique=False) or trained (MTP ties counted once)."""
    total = sum(int(torch.tensor(s).prod()) for _, s, _, _ in make_model.tensor_list(cfg))
    if unique:
        total -= 2 * cfg["vocab_size"] * cfg["hidden_size"] * (cfg.get("num_nextn_predict_layers") or 0)
    return total


def verify_against_reference(model_dir, ids):
    """Twin (loaded from the checkpoint, f64) vs reference.py: max relative
    error of main and MTP logits."""
    ref = R.load(model_dir)
    twin = Model(ref.cfg).double()
    twin.load_hf(ref.W)
    with torch.no_grad():
        lg, mt = twin(torch.tensor([ids]))
    a = ref.logits(ids)
    b = ref.mtp_logits(ids)
    e1 = float((lg[0] - a).abs().max() / a.abs().max())
    e2 = float((mt[0] - b).abs().max() / b.abs().max())
    return e1, e2
