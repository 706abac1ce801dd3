#!/usr/bin/python3
"""The bundled default model (models/deepinfer-tiny-moe): deepinfer against
the float64 PyTorch reference, and greedy text that reads as language.

Checks:
  files     the HF files are there, config is the architecture the issue asks
            for, the checkpoint is at most 50 MB
  f32       `deepinfer logits` (prefill 48 in-domain ids, then 24 decode
            steps) vs tools/reference.py: max |err| <= 1e-4 * max |logit|,
            main head and MTP depth 0
  bf16      the default dtype agrees with the reference on top-1 >= 95 %
  language  `deepinfer generate` greedy from an in-domain prompt: at least
            12 words, at least 6 distinct, and >= 70 % of them are words of the training corpus
            (corpus_words.txt, written by tools/train/evaluate.py)
  chat      the tokenizer_config's chat template names the DSML format, so
            deepinfer renders chats for this model in the format it was
            trained on
Prints one line per check and "N passed, N failed" last; exits 1 on failure.
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import traceback

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.join(ROOT, "tools"))
sys.path.insert(0, os.path.join(ROOT, "tools", "train"))
import reference as R  # noqa: E402
import tokenizer as T  # noqa: E402

BIN = os.environ.get("DI_BIN", os.path.join(ROOT, "build", "deepinfer"))
MODEL = os.environ.get("DI_DEFAULT_MODEL", os.path.join(ROOT, "models", "deepinfer-tiny-moe"))
TOL = 1e-4
TIMEOUT = 120
TEXT = ("This program is free software; you can redistribute it and/or modify it under the terms of the "
        "GNU General Public License as published by the Free Software Foundation. The program reads the "
        "configuration file and prints a summary of the options that are set.")
PROMPT = "This package provides"

passed = failed = 0


def check(name, fn):
    global passed, failed
    try:
        ok, detail = fn()
    except Exception as e:  # noqa: BLE001
        ok, detail = False, f"{type(e).__name__}: {e}"
        traceback.print_exc(limit=3)
    if ok:
        passed += 1
    else:
        failed += 1
    print(f"{'ok  ' if ok else 'FAIL'} {name}" + (f"  {detail}" if detail else ""), flush=True)


_ref = None


def ref():
    global _ref
    if _ref is None:
        _ref = R.load(MODEL)
    return _ref


def ids():
    tok = T.Tokenizer.load(MODEL)
    x = tok.encode(T.BOS + TEXT)
    return x[:72]


def run_logits(dtype, mtp):
    x = ids()
    V = ref().vocab
    with tempfile.TemporaryDirectory() as d:
        out, mout = os.path.join(d, "l.bin"), os.path.join(d, "m.bin")
        cmd = [BIN, "logits", "--model", MODEL, "--ids", " ".join(map(str, x)), "--prompt-len", "48",
               "--dtype", dtype, "--threads", "2", "--out", out]
        if mtp:
            cmd += ["--mtp-out", mout]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT)
        if r.returncode:
            raise RuntimeError(f"exit {r.returncode}: {(r.stderr.strip() or '(no message)').splitlines()[-1]}")
        lg = np.fromfile(out, "<f4").reshape(-1, V)
        m = np.fromfile(mout, "<f4").reshape(-1, V) if mtp else None
    return x, lg, m


def t_files():
    need = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
            "generation_config.json", "README.md"]
    missing = [f for f in need if not os.path.exists(os.path.join(MODEL, f))]
    if missing:
        return False, f"missing {missing}"
    size = sum(os.path.getsize(os.path.join(MODEL, f)) for f in os.listdir(MODEL))
    c = json.load(open(os.path.join(MODEL, "config.json")))
    lt = c.get("layer_types", [])
    n_sl = sum(t == "sliding_attention" for t in lt)
    arch = (c["model_type"] == "deepseek_v3" and c["n_routed_experts"] >= 8 and c["num_experts_per_tok"] == 2
            and c["n_shared_experts"] == 1 and c["scoring_func"] == "sigmoid" and c["topk_method"] == "noaux_tc"
            and c["num_nextn_predict_layers"] == 1 and c["sliding_window"] == 128 and n_sl >= 1
            and lt == ["sliding_attention"] * n_sl + ["full_attention"] * (len(lt) - n_sl) and n_sl < len(lt))
    return size <= 50 * 2**20 and arch, f"{size / 2**20:.1f} MB, architecture {'as specified' if arch else 'WRONG'}"


def t_f32():
    x, lg, _ = run_logits("f32", False)
    want = ref().logits(x)[47:].numpy()
    r = float(np.abs(lg - want).max() / np.abs(want).max())
    return r <= TOL, f"max|err|/max|logit| = {r:.2e} (limit {TOL:.0e})"


def t_mtp():
    x, _, m = run_logits("f32", True)
    want = ref().mtp_logits(x).numpy()
    r = float(np.abs(m - want).max() / np.abs(want).max())
    return r <= TOL, f"MTP max|err|/max|logit| = {r:.2e} (limit {TOL:.0e})"


def t_bf16():
    x, lg, _ = run_logits("bf16", False)
    want = ref().logits(x)[47:].numpy()
    agree = float((lg.argmax(-1) == want.argmax(-1)).mean())
    return agree >= 0.95, f"top-1 agreement {agree * 100:.1f} % (min 95 %)"


def t_language():
    words = set(open(os.path.join(MODEL, "corpus_words.txt")).read().split())
    r = subprocess.run([BIN, "generate", "--model", MODEL, "--prompt", PROMPT, "--max-tokens", "48",
                        "--threads", "2"], capture_output=True, text=True, timeout=TIMEOUT)
    if r.returncode:
        return False, f"exit {r.returncode}: {r.stderr.strip()[-200:]}"
    text = r.stdout
    ws = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    frac = sum(w in words for w in ws) / max(1, len(ws))
    print("     " + repr(text[:300]))
    distinct = len(set(ws))
    return len(ws) >= 12 and frac >= 0.7 and distinct >= 6, \
        f"{len(ws)} words ({distinct} distinct, min 6), {frac * 100:.0f} % in the corpus vocabulary (min 70 %)"


def t_chat():
    c = json.load(open(os.path.join(MODEL, "tokenizer_config.json"), encoding="utf-8"))
    t = json.load(open(os.path.join(MODEL, "tokenizer.json"), encoding="utf-8"))
    added = {a["content"] for a in t["added_tokens"]}
    ok = "｜DSML｜" in c["chat_template"] and all(a in added for a, _ in T.ADDED)
    return ok, "chat template in the DSML (deepseek-v4) format, added tokens present"


def main():
    if not os.path.exists(os.path.join(MODEL, "config.json")):
        print(f"FAIL {MODEL}: no model (make train-default)")
        print("0 passed, 1 failed")
        return 1
    check("default model files", t_files)
    check("chat format", t_chat)
    if os.environ.get("DI_REF_SKIP_BIN") != "1":
        check("f32 vs reference (main)", t_f32)
        check("f32 vs reference (MTP depth 0)", t_mtp)
        check("bf16 top-1 vs reference", t_bf16)
        check("greedy generation reads as language", t_language)
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
