#!/usr/bin/python3
"""deepinfer's model code against the independent float64 PyTorch reference.

Part 1 checks the reference itself (hand-computed cases, causal truncation,
the checkpoint writer/reader round trip, tokenizer, determinism of the model
maker, and that the tiny models are peaky enough for quantised top-1
agreement to be a fair test). Part 2 runs `$DI_BIN logits` on every tiny
preset in $DI_TEST_MODELS: 96 ids = a 64-token random prompt plus the
reference's 32-token greedy continuation; prefill 64, then decode one by one.
  f32:        max |err| <= 1e-4 * max |logit|  (MTP depth 0 too, dsv3-tiny)
  threads:    f32 output with --threads 1 and 2 is bit-identical
  bf16/int8:  top-1 agreement with the f32 run >= 98 % (mean KL printed); the
              same for f32 weights over a bf16 KV cache and bf16 weights
              over an f32 one
  ISA:        the same with DEEPINFER_ISA=avx2 (f32, bf16, int8) and
              DEEPINFER_ISA=scalar (f32), the lower kernel sets end to end;
              an unknown set is refused and scalar differs from native
Prints one line per check and "N passed, N failed" last; exits 1 on failure.
Set DI_REF_SKIP_BIN=1 to run part 1 only; DI_REF_PRESETS=a,b to narrow.
"""

import math
import os
import subprocess
import sys
import tempfile
import time
import traceback
import zlib

import numpy as np
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
import bpe_tokenizer  # noqa: E402
import make_model  # noqa: E402
import reference as R  # noqa: E402

BIN = os.environ.get("DI_BIN", os.path.join(ROOT, "build", "deepinfer"))
MODELS = os.environ.get("DI_TEST_MODELS", os.path.join(ROOT, "build", "models"))
PRESETS = [n for n, p in make_model.PRESETS.items() if p["tiny"]]
if os.environ.get("DI_REF_PRESETS"):
    PRESETS = [p for p in os.environ["DI_REF_PRESETS"].split(",") if p]
PROMPT, GEN = 64, 32
TOL = 1e-4
MIN_AGREE = 0.98
BIN_TIMEOUT = int(os.environ.get("DI_REF_TIMEOUT", "60"))  # seconds per run; tiny models take well under 1 s
_hung = set()

passed = failed = 0


def check(name, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"  {detail}" if detail else ""), flush=True)


def run_check(name, fn):
    """fn() returns (ok, detail); an exception is a failure with its message."""
    try:
        ok, detail = fn()
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=3)
    check(name, ok, detail)


def close(a, b, tol=1e-12):
    return float(torch.as_tensor(a - b).abs().max()) <= tol


# --------------------------------------------------------------------------
# part 1: the reference and the model maker


def t_formats():
    t = R.FP8_E4M3
    ok = t[0x38] == 1.0 and t[0x7E] == 448.0 and t[0xFE] == -448.0 and t[0x08] == 2.0**-6
    ok &= t[0x01] == 2.0**-9 and t[0x3C] == 1.5 and math.isnan(t[0x7F]) and t[0x80] == 0.0
    codes = make_model.to_e4m3(np.array([1.0, -1.5, 448.0, 1000.0, 2.0**-9, 0.0], np.float32))
    ok &= list(codes) == [0x38, 0xBC, 0x7E, 0x7E, 0x01, 0x00]
    bf = make_model.to_bf16(np.array([1.0, -2.0, 1.00390625, 1.01171875], np.float32))
    ok &= list(bf) == [0x3F80, 0xC000, 0x3F80, 0x3F82]  # ties to even
    return ok, ""


def t_rms_norm():
    y = R.rms_norm(torch.tensor([3.0, 4.0], dtype=R.F64), torch.tensor([1.0, 2.0], dtype=R.F64), 0.0)
    r = math.sqrt(12.5)
    return close(y, torch.tensor([3 / r, 8 / r], dtype=R.F64)), ""


def t_attention_window():
    # q = 0: uniform weights over the visible keys, so out[i] = mean of visible v.
    T = 5
    q = torch.zeros(T, 1, 2, dtype=R.F64)
    k = torch.randn(T, 1, 2, dtype=R.F64)
    v = torch.arange(T, dtype=R.F64).view(T, 1, 1)
    full = R.attention(q, k, v, 1.0, None).flatten()
    win = R.attention(q, k, v, 1.0, 2).flatten()
    ok = close(full, torch.tensor([0, 0.5, 1, 1.5, 2], dtype=R.F64))
    ok &= close(win, torch.tensor([0, 0.5, 1.5, 2.5, 3.5], dtype=R.F64))
    # GQA: 4 query heads over 2 kv heads, head h uses kv head h // 2
    v2 = torch.stack([torch.ones(T), 2 * torch.ones(T)], 1).view(T, 2, 1).to(R.F64)
    o = R.attention(torch.zeros(T, 4, 2, dtype=R.F64), torch.zeros(T, 2, 2, dtype=R.F64), v2, 1.0, None)
    ok &= close(o[0].flatten(), torch.tensor([1, 1, 2, 2], dtype=R.F64))
    return ok, ""


def t_rope():
    inv = torch.tensor([1.0, 0.1], dtype=R.F64)
    pos = torch.tensor([3])
    x = torch.tensor([[[1.0, 2.0, 3.0, 4.0]]], dtype=R.F64)
    # half-split: pairs (x0, x2) and (x1, x3)
    c0, s0, c1, s1 = math.cos(3), math.sin(3), math.cos(0.3), math.sin(0.3)
    want = [1 * c0 - 3 * s0, 2 * c1 - 4 * s1, 1 * s0 + 3 * c0, 2 * s1 + 4 * c1]
    ok = close(R.rope_half(x, pos, inv).flatten(), torch.tensor(want, dtype=R.F64))
    # interleaved: pairs (x0, x1) and (x2, x3) as complex numbers
    z0, z1 = complex(1, 2) * complex(c0, s0), complex(3, 4) * complex(c1, s1)
    ok &= close(R.rope_pairs(x, pos, inv).flatten(), torch.tensor([z0.real, z0.imag, z1.real, z1.imag], dtype=R.F64))
    # equivalence with HF modeling_deepseek: permute (view d/2,2 -> transpose) then rotate_half
    q = torch.randn(7, 3, 8, dtype=R.F64)
    k = torch.randn(7, 1, 8, dtype=R.F64)
    p = torch.arange(7)
    inv4 = R.default_inv_freq(8, 10000.0)

    def hf(x):
        x = x.view(*x.shape[:-1], 4, 2).transpose(-1, -2).reshape(x.shape)
        return R.rope_half(x, p, inv4)

    a = torch.einsum("ihd,jhd->hij", R.rope_pairs(q, p, inv4), R.rope_pairs(k, p, inv4).expand(7, 3, 8))
    b = torch.einsum("ihd,jhd->hij", hf(q), hf(k).expand(7, 3, 8))
    ok &= close(a, b, 1e-10)
    return ok, ""


def t_yarn():
    cfg = make_model.PRESETS["dsv2-tiny"]["config"]
    inv, ms, scale = R.deepseek_rope(cfg)
    # dim 8, base 1e4, orig 4096: correction dims 1.31 (beta_fast 32) and 2.81 (beta_slow 1)
    lo, hi = R.yarn_find_correction_range(32, 1, 8, 10000.0, 4096)
    extra = [10000.0 ** (-i / 8) for i in (0, 2, 4, 6)]
    inter = [e / 40.0 for e in extra]
    want = [extra[0], extra[1], 0.5 * extra[2] + 0.5 * inter[2], inter[3]]
    m = 0.1 * 0.707 * math.log(40.0) + 1.0
    ok = (lo, hi) == (1, 3) and close(inv, torch.tensor(want, dtype=R.F64)) and abs(ms - 1.0) < 1e-15
    ok &= abs(scale - (24**-0.5) * m * m) < 1e-15
    return ok, f"softmax scale {scale:.6f}"


def t_llama3_rope():
    cfg = make_model.PRESETS["llama3-tiny"]["config"]
    inv = R.llama_inv_freq(cfg, 16)
    base = [500000.0 ** (-i / 16) for i in range(0, 16, 2)]
    want = []
    for f in base:
        wl = 2 * math.pi / f
        if wl < 8192 / 4:
            want.append(f)
        elif wl > 8192 / 1:
            want.append(f / 8)
        else:
            s = (8192 / wl - 1) / (4 - 1)
            want.append((1 - s) * f / 8 + s * f)
    regimes = {("hi" if 2 * math.pi / f < 2048 else "lo" if 2 * math.pi / f > 8192 else "mid") for f in base}
    return close(inv, torch.tensor(want, dtype=R.F64), 1e-15) and regimes == {"hi", "mid", "lo"}, ""


def _fake(cfg, W, mt):
    m = R.Model.__new__(R.Model)
    m.cfg, m.W, m.mt = cfg, W, mt
    return m


def t_routing():
    T = lambda v: torch.tensor(v, dtype=R.F64)  # noqa: E731
    logit = T([[0.0, 1.0, 2.0, 3.0, -1.0, 2.5, 0.5, 1.5]])  # gate weight = identity, x = logit
    W = {"g.gate.weight": torch.eye(8, dtype=R.F64), "g.gate.e_score_correction_bias": T([0, 0, 0, -2.5, 0, 0, 0, 0.9])}
    # V3 noaux_tc, 2 groups of 4, keep 1 group, top-2, normalised, x2.5
    cfg = dict(num_experts_per_tok=2, topk_method="noaux_tc", scoring_func="sigmoid", n_group=2, topk_group=1,
               norm_topk_prob=True, routed_scaling_factor=2.5)
    w, idx = _fake(cfg, W, "deepseek_v3").route(logit, "g.")
    sg = torch.sigmoid(logit[0])
    ch = sg + W["g.gate.e_score_correction_bias"]
    # group 0 choice top-2: experts 2 (0.881) and 1 (0.731) = 1.612; group 1: 7 (0.818+0.9) and 5 (0.924) = 2.642
    g0 = sorted(ch[:4].tolist())[-2:]
    g1 = sorted(ch[4:].tolist())[-2:]
    ok = sum(g1) > sum(g0) and sorted(idx[0].tolist()) == [5, 7]
    wsel = {int(i): float(x) for i, x in zip(idx[0], w[0])}
    den = float(sg[5] + sg[7]) + 1e-20
    ok &= abs(wsel[5] - 2.5 * float(sg[5]) / den) < 1e-12 and abs(wsel[7] - 2.5 * float(sg[7]) / den) < 1e-12
    # V3 without norm: sigmoid scores * rsf
    cfg2 = dict(cfg, norm_topk_prob=False)
    w2, idx2 = _fake(cfg2, W, "deepseek_v3").route(logit, "g.")
    ok &= all(abs(float(x) - 2.5 * float(sg[int(i)])) < 1e-12 for i, x in zip(idx2[0], w2[0]))
    # V2 group_limited_greedy, 4 groups of 2, keep 2 groups by max, top-3, not normalised: * rsf
    cfgv2 = dict(num_experts_per_tok=3, topk_method="group_limited_greedy", scoring_func="softmax", n_group=4,
                 topk_group=2, norm_topk_prob=False, routed_scaling_factor=1.5)
    w3, idx3 = _fake(cfgv2, W, "deepseek_v2").route(logit, "g.")
    sm = torch.softmax(logit[0], -1)
    # group maxima: g0 {0,1}: 1.0, g1 {2,3}: 3.0, g2 {4,5}: 2.5, g3 {6,7}: 1.5 -> groups 1, 2 -> experts 3, 5, 2
    ok &= sorted(idx3[0].tolist()) == [2, 3, 5]
    ok &= all(abs(float(x) - 1.5 * float(sm[int(i)])) < 1e-12 for i, x in zip(idx3[0], w3[0]))
    # V2 normalised (top_k > 1): weights sum to 1, no rsf
    w4, _ = _fake(dict(cfgv2, norm_topk_prob=True), W, "deepseek_v2").route(logit, "g.")
    ok &= abs(float(w4.sum()) - 1.0) < 1e-12
    return ok, ""


def t_moe_layer_rule():
    m = _fake({"n_routed_experts": 8, "first_k_dense_replace": 1, "moe_layer_freq": 2}, {}, "deepseek_v3")
    return [m.is_moe(i) for i in range(5)] == [False, False, True, False, True], ""


def t_windows():
    out = []
    for n in ("mistral-tiny", "hybrid-tiny", "qwen2-tiny", "llama3-tiny"):
        c = make_model.PRESETS[n]["config"]
        m = _fake(c, {}, c["model_type"])
        out.append([m.window(i) for i in range(c["num_hidden_layers"])])
    want = [[16, 16], [16, 16, None, None], [None, None], [None, None]]
    return out == want, str(out)


def t_tokenizer():
    vocab, merges = bpe_tokenizer.trained(make_model.N_TOK)
    text = "Hello, world! def forward(self, x): return x * 2  # 1234\n\tünïcode ok"
    ids = bpe_tokenizer.encode(text, vocab, merges)
    ok = bpe_tokenizer.decode(ids, vocab) == text and len(vocab) == make_model.N_TOK
    ok &= all((a + b) in vocab for a, b in merges) and len(ids) < len(text.encode()) * 0.7
    d = tempfile.mkdtemp()
    sp = bpe_tokenizer.write(d, make_model.N_TOK)
    ok &= sorted(sp.values()) == list(range(500, 500 + len(bpe_tokenizer.SPECIAL_TOKENS)))
    return ok, f"{len(ids)} ids for {len(text.encode())} bytes"


def t_maker_determinism():
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        make_model.make("dsv3-tiny", a, 0)
        make_model.make("dsv3-tiny", b, 0)
        fa = open(os.path.join(a, "model.safetensors"), "rb").read()
        same = fa == open(os.path.join(b, "model.safetensors"), "rb").read()
        make_model.make("dsv3-tiny", b, 1)
        diff = fa != open(os.path.join(b, "model.safetensors"), "rb").read()
        r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_model.py"), "--preset", "all-tiny",
                            "--out", a], capture_output=True, text=True)
        r2 = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "make_model.py"), "--preset", "all-tiny",
                             "--out", a], capture_output=True, text=True)
        fresh = r2.stdout.count("up to date") == len([p for p in make_model.PRESETS.values() if p["tiny"]])
        return same and diff and r.returncode == 0 and fresh, ""


def t_roundtrip(name):
    """The reader gives back what the writer was asked to store."""
    def fn():
        p = make_model.PRESETS[name]
        with tempfile.TemporaryDirectory() as d:
            make_model.make(name, d, 0)
            W = R.read_checkpoint(d)
        seed = 0 * 1000003 + make_model.zlib.crc32(name.encode()) % 1000003
        worst = 0.0
        n = 0
        for (tname, shape, init, _), ents in make_model.stored_entries(p):
            x = torch.from_numpy(make_model.gen_tensor(tname, shape, init, seed, p["config"]).astype(np.float64))
            y = W[tname]
            if tuple(y.shape) != tuple(shape):
                return False, f"{tname}: shape {tuple(y.shape)} != {shape}"
            st = ents[0][1]
            if st == "F8_E4M3":  # e4m3 has 3 mantissa bits: error <= 1/16 relative, per 128x128 block amax
                amax = x.abs().max()
                err = float((x - y).abs().max() / amax)
                lim = 1 / 16
            elif st == "BF16":
                err, lim = float(((x - y).abs() / x.abs().clamp_min(1e-30)).max()), 2.0**-8
            elif st == "F16":
                err, lim = float(((x - y).abs() / x.abs().clamp_min(1e-4)).max()), 2.0**-10
            else:
                err, lim = float((x - y).abs().max()), 0.0
            if err > lim:
                return False, f"{tname} ({st}): error {err:.3g} > {lim:.3g}"
            worst = max(worst, err)
            n += 1
        return True, f"{n} tensors, worst {worst:.3g}"
    return fn


def t_fp8_blocks():
    with tempfile.TemporaryDirectory() as d:
        make_model.make("dsv3-tiny", d, 0)
        raw = R.read_safetensors_file(os.path.join(d, "model.safetensors"))
    s = raw["model.layers.0.self_attn.q_b_proj.weight_scale_inv"]  # weight [192, 96]
    kv = raw["model.layers.0.self_attn.kv_b_proj.weight_scale_inv"]  # [256, 32]
    ok = s.shape == (2, 1) and kv.shape == (2, 1) and "model.layers.0.mlp.gate.weight_scale_inv" not in raw
    ok &= "model.layers.1.mlp.gate.weight" in raw and "model.layers.3.eh_proj.weight" in raw
    # dequantised block maxima reach 448 * scale exactly (the block amax maps to 448)
    w = raw["model.layers.0.self_attn.q_b_proj.weight"]
    ok &= abs(np.abs(w[:128]).max() - 448.0) < 1e-9 and abs(np.abs(w[128:]).max() - 448.0) < 1e-9
    return ok, ""


_models = {}


def ref(name):
    if name not in _models:
        _models[name] = R.load(os.path.join(MODELS, name))
    return _models[name]


def _prompt(name):
    rng = np.random.default_rng([7, zlib.crc32(name.encode())])
    return rng.integers(0, make_model.N_TOK, PROMPT).tolist()


_seqs = {}


def seq(name):
    """64 random prompt ids + the reference's 32-token greedy continuation."""
    if name not in _seqs:
        m = ref(name)
        p = _prompt(name)
        _seqs[name] = p + m.greedy(p, GEN)
    return _seqs[name]


def t_causal(name):
    def fn():
        m = ref(name)
        ids = seq(name)
        full = m.logits(ids)
        part = m.logits(ids[:40])
        err = float((full[:40] - part).abs().max())
        ok = err < 1e-10
        if m.cfg.get("num_nextn_predict_layers"):
            mf = m.mtp_logits(ids)
            mp = m.mtp_logits(ids[:40])
            e2 = float((mf[:39] - mp).abs().max())
            ok &= e2 < 1e-10 and mf.shape == (len(ids) - 1, m.vocab)
            err = max(err, e2)
        return ok, f"max diff {err:.1e}"
    return fn


def t_peaky(name):
    """Simulated bf16 / int8 weights keep >= 98 % top-1 agreement: the model
    is peaky enough for the binary's agreement checks to be fair."""
    def fn():
        ids = seq(name)
        base = ref(name).logits(ids)[PROMPT - 1:]
        s = torch.sort(base, -1, descending=True).values
        margin = float((s[:, 0] - s[:, 1]).min())
        cont = ids[PROMPT:]
        out = [f"min margin {margin:.2f}", f"distinct continuation ids {len(set(cont))}"]
        ok = True
        for q in ("bf16", "int8"):
            lq = R.load(os.path.join(MODELS, name), quantize=q).logits(ids)[PROMPT - 1:]
            a = float((lq.argmax(-1) == base.argmax(-1)).double().mean())
            ok &= a >= MIN_AGREE
            out.append(f"{q} {a * 100:.1f}%")
        return ok, ", ".join(out)
    return fn


def _mutants(name):
    """Plausible implementation mistakes, as modified reference models. Each
    must move the logits by 10x the f32 tolerance or more, or the binary
    check could not see that mistake on this preset. (A wrong rms_norm eps is
    below what the tolerance can see: eps 1e-6 vs 1e-4 moves logits ~4e-5.)"""
    base = ref(name)
    cfg, W = base.cfg, base.W

    def with_cfg(**kw):
        return lambda: R.Model(dict(cfg, **kw), W)

    def with_w(f):
        return lambda: R.Model(cfg, {k: f(k, v) for k, v in W.items()})

    def swapped_rope():
        m = R.Model(cfg, W)
        m.rope_gqa = lambda x, p, f: R.rope_pairs(x, p, f)
        m.rope_mla = lambda x, p, f, ms: R.rope_half(x, p, f) * ms
        return m

    out = [("rope layout swapped (half-split <-> pairs)", swapped_rope)]
    mt = cfg["model_type"]
    if mt == "llama":
        out.append(("llama3 rope scaling ignored", with_cfg(rope_scaling=None)))
    if mt == "qwen2":
        out.append(("q/k/v bias dropped", with_w(lambda k, v: v * 0 if k.endswith("_proj.bias") else v)))
    if mt == "qwen3":
        out.append(("q/k norm skipped", with_w(lambda k, v: v * 0 + 1 if k.endswith(("q_norm.weight", "k_norm.weight")) else v)))
    if mt == "mistral":
        out.append(("sliding window ignored", with_cfg(sliding_window=None)))
    if "layer_types" in cfg:
        out.append(("layer_types ignored (all full)", with_cfg(layer_types=None)))
        out.append(("window off by one (i - j <= window)", with_cfg(sliding_window=cfg["sliding_window"] + 1)))
    if mt.startswith("deepseek"):
        rs = cfg.get("rope_scaling")
        if rs:
            out.append(("YaRN ignored", with_cfg(rope_scaling=None)))
            out.append(("YaRN softmax mscale^2 ignored", with_cfg(rope_scaling=dict(rs, mscale_all_dim=0, mscale=0))))
        out.append(("routed_scaling_factor ignored", with_cfg(routed_scaling_factor=1.0)))
        out.append(("shared expert dropped", with_cfg(n_shared_experts=0)))
        if cfg.get("topk_method") == "noaux_tc":
            out.append(("e_score_correction_bias ignored",
                        with_w(lambda k, v: v * 0 if k.endswith("e_score_correction_bias") else v)))
            out.append(("norm_topk_prob ignored", with_cfg(norm_topk_prob=not cfg.get("norm_topk_prob"))))
        if cfg.get("n_group", 1) > 1:
            out.append(("group limit ignored", with_cfg(topk_group=cfg["n_group"])))
    return out


def t_sensitive_mtp(name):
    def fn():
        m, ids = ref(name), seq(name)
        base = m.mtp_logits(ids)
        scale = float(base.abs().max())
        muts = [("hidden before the final norm", lambda: m.mtp_logits(ids, hidden=m.hidden(ids, final_norm=False))),
                ("hidden of the next position", lambda: m.mtp_logits(ids, hidden=torch.cat([m.hidden(ids)[1:], m.hidden(ids)[-1:]])))]
        weak, parts = [], []
        for label, f in muts:
            r = float((f() - base).abs().max()) / scale
            parts.append(f"{label} {r:.0e}")
            if r < 10 * TOL:
                weak.append(label)
        return not weak, ("too weak: " + "; ".join(weak) + " | " if weak else "") + ", ".join(parts)
    return fn


def t_sensitive(name):
    def fn():
        ids = seq(name)
        base = ref(name).logits(ids)[PROMPT - 1:]
        scale = float(base.abs().max())
        weak, parts = [], []
        for label, make in _mutants(name):
            r = float((make().logits(ids)[PROMPT - 1:] - base).abs().max()) / scale
            parts.append(f"{label} {r:.0e}")
            if r < 10 * TOL:
                weak.append(label)
        return not weak, ("too weak: " + "; ".join(weak) + " | " if weak else "") + ", ".join(parts)
    return fn


# --------------------------------------------------------------------------
# part 2: the binary


def run_bin(name, dtype, threads, mtp=False, isa="native", kv="auto"):
    """Returns (logits [rows, V] f32, mtp or None); raises RuntimeError with the
    binary's own message on failure. isa sets DEEPINFER_ISA: native, avx2 or
    scalar kernels; kv is --kv-dtype."""
    if name in _hung:
        raise RuntimeError("skipped: an earlier run on this model timed out")
    ids = seq(name)
    V = ref(name).vocab
    with tempfile.TemporaryDirectory() as d:
        out, mout = os.path.join(d, "l.bin"), os.path.join(d, "m.bin")
        cmd = [BIN, "logits", "--model", os.path.join(MODELS, name), "--ids", " ".join(map(str, ids)),
               "--prompt-len", str(PROMPT), "--dtype", dtype, "--kv-dtype", kv, "--threads", str(threads),
               "--out", out]
        if mtp:
            cmd += ["--mtp-out", mout]
        try:
            r = subprocess.run(cmd, capture_output=True, text=True, timeout=BIN_TIMEOUT,
                               env=dict(os.environ, DEEPINFER_ISA=isa))
        except subprocess.TimeoutExpired:
            _hung.add(name)
            raise RuntimeError(f"{os.path.basename(BIN)} logits timed out after {BIN_TIMEOUT} s") from None
        if r.returncode != 0:
            msg = (r.stderr.strip() or r.stdout.strip() or "(no message)").splitlines()[-1]
            raise RuntimeError(f"exit {r.returncode}: {msg}")
        rows = len(ids) - PROMPT + 1
        lg = np.fromfile(out, "<f4")
        if lg.size != rows * V:
            raise RuntimeError(f"{out}: {lg.size} floats, want {rows} x {V}")
        m = None
        if mtp:
            m = np.fromfile(mout, "<f4")
            if m.size != (len(ids) - 1) * V:
                raise RuntimeError(f"--mtp-out: {m.size} floats, want {len(ids) - 1} x {V}")
            m = m.reshape(len(ids) - 1, V)
        return lg.reshape(rows, V), m


def kl(p_logits, q_logits):
    p = torch.log_softmax(torch.as_tensor(p_logits, dtype=R.F64), -1)
    q = torch.log_softmax(torch.as_tensor(q_logits, dtype=R.F64), -1)
    return float((p.exp() * (p - q)).sum(-1).mean())


def t_isa():
    name = PRESETS[0]
    r = subprocess.run([BIN, "logits", "--help"], capture_output=True, text=True, timeout=BIN_TIMEOUT,
                       env=dict(os.environ, DEEPINFER_ISA="avx9"))
    if r.returncode != 2 or "DEEPINFER_ISA" not in r.stderr:
        return False, f"DEEPINFER_ISA=avx9: exit {r.returncode}, stderr {r.stderr.strip()!r}"
    with open("/proc/cpuinfo") as f:
        avx2 = " avx2 " in f.read()
    if not avx2:
        return True, "no AVX2 here: native is the portable set"
    native, _ = run_bin(name, "f32", 2)
    scalar, _ = run_bin(name, "f32", 2, isa="scalar")
    differ = not np.array_equal(native.view(np.uint32), scalar.view(np.uint32))
    return differ, "" if differ else "DEEPINFER_ISA=scalar gave the native kernels' bits"


def binary_checks(name):
    m = ref(name)
    ids = seq(name)
    want = m.logits(ids)[PROMPT - 1:].numpy()
    has_mtp = bool(m.cfg.get("num_nextn_predict_layers"))
    f32 = {}

    def f32_run(threads):
        if threads not in f32:
            f32[threads] = run_bin(name, "f32", threads, has_mtp)
        return f32[threads]

    def c_f32():
        got, _ = f32_run(2)
        ratio = float(np.abs(got - want).max() / np.abs(want).max())
        return ratio <= TOL, f"max|err|/max|logit| = {ratio:.2e} (limit {TOL:.0e})"

    run_check(f"{name} f32 vs reference", c_f32)

    if has_mtp:
        def c_mtp():
            _, got = f32_run(2)
            w = m.mtp_logits(ids).numpy()
            ratio = float(np.abs(got - w).max() / np.abs(w).max())
            return ratio <= TOL, f"max|err|/max|logit| = {ratio:.2e} (limit {TOL:.0e})"

        run_check(f"{name} MTP depth-0 f32 vs reference", c_mtp)

    def c_threads():
        a, ma = f32_run(1)
        b, mb = f32_run(2)
        same = np.array_equal(a.view(np.uint32), b.view(np.uint32))
        if has_mtp:
            same &= np.array_equal(ma.view(np.uint32), mb.view(np.uint32))
        return same, "" if same else f"max diff {float(np.abs(a - b).max()):.3g}"

    run_check(f"{name} f32 --threads 1 == --threads 2", c_threads)

    # The lower kernel sets end to end (on an AVX-512 machine they are not
    # what runs by default; on an AVX2 one "avx2" is the default again).
    for isa in ("native", "avx2", "scalar"):
        if isa != "native":
            def c_isa(isa=isa):
                got, _ = run_bin(name, "f32", 2, isa=isa)
                ratio = float(np.abs(got - want).max() / np.abs(want).max())
                return ratio <= TOL, f"max|err|/max|logit| = {ratio:.2e} (limit {TOL:.0e})"

            run_check(f"{name} f32 vs reference, DEEPINFER_ISA={isa}", c_isa)
        # bf16 and int8 keep a bf16 KV cache by default; f32 weights over a
        # bf16 cache, and bf16 weights over an f32 one, each alone.
        for dt, kv in (("bf16", "auto"), ("int8", "auto"), ("f32", "bf16"), ("bf16", "f32")):
            if isa == "scalar" or (kv != "auto" and isa != "native"):
                continue  # the portable kernels are checked in f32 above and by the unit tests

            def c_q(dt=dt, isa=isa, kv=kv):
                base, _ = f32_run(2)
                got, _ = run_bin(name, dt, 2, isa=isa, kv=kv)
                agree = float((got.argmax(-1) == base.argmax(-1)).mean())
                what = dt if kv == "auto" else f"{dt}, {kv} KV"
                return agree >= MIN_AGREE, f"top-1 agreement {agree * 100:.1f}%, mean KL(f32||{what}) {kl(base, got):.2e}"

            label = dt if kv == "auto" else f"{dt} --kv-dtype {kv}"
            run_check(f"{name} {label} vs f32" + ("" if isa == "native" else f", DEEPINFER_ISA={isa}"), c_q)


def main():
    t0 = time.time()
    for n, fn in [
        ("formats: fp8-e4m3 / bf16 encode+decode", t_formats),
        ("rms_norm hand case", t_rms_norm),
        ("attention: causal, sliding window, GQA", t_attention_window),
        ("rope: half-split, interleaved pairs, HF DeepSeek permute equivalence", t_rope),
        ("YaRN inv_freq / mscale / softmax scale (dsv2-tiny config)", t_yarn),
        ("llama3 rope scaling, all three regimes", t_llama3_rope),
        ("MoE routing: V3 noaux_tc, V2 group_limited_greedy", t_routing),
        ("MoE layer rule (first_k_dense_replace, moe_layer_freq)", t_moe_layer_rule),
        ("sliding-window layer selection", t_windows),
        ("BPE tokenizer: round trip, merges, special ids", t_tokenizer),
        ("make_model: deterministic, seed-sensitive, all-tiny skips up-to-date", t_maker_determinism),
        ("fp8 128x128 block scales: partial blocks, shapes, unquantised tensors", t_fp8_blocks),
    ]:
        run_check(n, fn)
    for name in ("qwen3-tiny", "dsv3-tiny", "qwen2-tiny", "llama3-tiny"):
        run_check(f"{name} safetensors writer/reader round trip", t_roundtrip(name))

    if not os.path.isdir(MODELS):
        check(f"test models present in {MODELS}", False, "run tools/make_model.py --preset all-tiny --out DIR")
        print(f"{passed} passed, {failed} failed")
        return 1
    for name in PRESETS:
        run_check(f"{name} reference causal truncation", t_causal(name))
        run_check(f"{name} peaky enough (simulated quantised weights)", t_peaky(name))
        run_check(f"{name} f32 tolerance sees each plausible mistake", t_sensitive(name))
        if ref(name).cfg.get("num_nextn_predict_layers"):
            run_check(f"{name} MTP tolerance sees each plausible mistake", t_sensitive_mtp(name))
    print(f"# reference self-checks took {time.time() - t0:.1f}s", flush=True)

    if os.environ.get("DI_REF_SKIP_BIN"):
        print("# DI_REF_SKIP_BIN set: binary checks skipped")
    elif not os.access(BIN, os.X_OK):
        check(f"binary {BIN} exists", False, "build it with `make` (or set DI_BIN)")
    else:
        run_check("DEEPINFER_ISA: an unknown set is refused, scalar is not the native kernels", t_isa)
        for name in PRESETS:
            binary_checks(name)
    print(f"# total {time.time() - t0:.1f}s")
    print(f"{passed} passed, {failed} failed")
    return 0 if failed == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
