#!/usr/bin/python3
"""Trains deepinfer's default model on CPU: corpus -> tokenizer -> DeepSeek-V3
style MoE (MLA, sliding-window layers, MTP) -> HF checkpoint.

Owns: the data pipeline (corpus.py documents and dialogues, tokenizer.py
BPE, packing into fixed windows), the training loop (AdamW, warmup + cosine
over --steps, main next-token loss + --mtp-weight x next-next-token loss,
aux-loss-free expert balancing: after each step every MoE layer's
e_score_correction_bias moves by --bias-rate toward equal load, as
DeepSeek-V3 does), periodic checkpoints (torch state for --resume plus an
exported bf16 model, so an interrupted run still leaves a usable model).

Why shaped so: everything is seeded (python, numpy and torch RNGs, sorted
file lists, keyed-hash file picks, BPE ties broken by pair order), and torch
runs on one thread by default (threads change the reduction order, so the
bytes), so `make train-default` rebuilds the same model on a machine with
the same Debian files installed. The learning rate at a step depends only
on the step and the flags (--steps, --lr, --warmup), so a phase resumed from
a checkpoint follows a schedule fixed by its flags. There is no time limit
unless --max-minutes is given (it counts the resumed phases' minutes too,
and a run it cuts short is not the recipe's model).

Usage: train.py --out models/NAME [--steps N] [--seed S] [--resume] [--max-minutes M]
"""

import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import corpus as C  # noqa: E402
import model as M  # noqa: E402
import tokenizer as T  # noqa: E402

N_BPE = 4082  # + 14 added tokens = 4096


def log(*a):
    print(time.strftime("%H:%M:%S"), *a, flush=True)


def build_data(work, seed, n_dialogues):
    """Tokenizer + encoded data, cached in work/data-SEED.pt."""
    path = os.path.join(work, f"data-{seed}.pt")
    if os.path.exists(path):
        d = torch.load(path)
        return T.Tokenizer(d["vocab"], [tuple(m) for m in d["merges"]]), d
    t0 = time.time()
    docs = C.prose_docs(seed)
    words = C.corpus_words(docs)
    gens = C.Generators(docs, words)
    dials = gens.many(n_dialogues, seed * 7 + 1)
    log(f"corpus: {len(docs)} prose docs ({sum(map(len, docs)) / 1e6:.1f} MB), {len(dials)} dialogues "
        f"({sum(map(len, dials)) / 1e6:.1f} MB) in {time.time() - t0:.0f}s")
    # Held-out prose: every 40th document.
    held = [d for i, d in enumerate(docs) if i % 40 == 17]
    train_docs = [d for i, d in enumerate(docs) if i % 40 != 17]
    vocab, merges = T.train(train_docs + dials[:3000], N_BPE)
    tok = T.Tokenizer(vocab, merges)
    log(f"tokenizer: {tok.vocab_size} ids in {time.time() - t0:.0f}s")
    bos, eos = tok.added[T.BOS], tok.added[T.EOS]

    def enc_docs(ds):
        out = []
        for d in ds:
            out += [bos] + tok.encode_text(d) + [eos]
        return torch.tensor(out, dtype=torch.int16 if tok.vocab_size < 32768 else torch.int32)

    prose = enc_docs(train_docs)
    held_ids = enc_docs(held)
    dial_ids = [torch.tensor(tok.encode(x), dtype=torch.int16) for x in dials]
    log(f"encoded: prose {len(prose)} tokens, held-out prose {len(held_ids)}, dialogues "
        f"{sum(len(x) for x in dial_ids)} tokens in {time.time() - t0:.0f}s")
    d = {"vocab": vocab, "merges": [list(m) for m in merges], "prose": prose, "held": held_ids,
         "dialogues": dial_ids, "words": words}
    os.makedirs(work, exist_ok=True)
    torch.save(d, path)
    return tok, d


class Batches:
    """Windows of seq+1 tokens: with probability p_dial, dialogues packed
    whole (the tail filled with prose), else a prose chunk."""

    def __init__(self, d, seq, p_dial, seed):
        self.prose, self.dials, self.seq, self.p_dial = d["prose"].long(), d["dialogues"], seq, p_dial
        self.r = random.Random(seed)
        self.order = list(range(len(self.dials)))
        self.r.shuffle(self.order)
        self.di = 0
        self.pp = 0

    def _prose(self, n):
        if self.pp + n > len(self.prose):
            self.pp = 0
        x = self.prose[self.pp:self.pp + n]
        self.pp += n
        return x

    def _dialogue(self):
        if self.di == len(self.order):
            self.r.shuffle(self.order)
            self.di = 0
        x = self.dials[self.order[self.di]].long()
        self.di += 1
        return x

    def window(self):
        n = self.seq + 1
        if self.r.random() >= self.p_dial:
            return self._prose(n)
        parts, used = [], 0
        while True:
            x = self._dialogue()
            if used + len(x) > n:
                if used == 0:
                    return x[:n]
                self.di -= 1  # keep it for the next window
                break
            parts.append(x)
            used += len(x)
        parts.append(self._prose(n - used))
        return torch.cat(parts)

    def batch(self, b):
        return torch.stack([self.window() for _ in range(b)])


def answer_weights(x, assistant, think_end, eos, w):
    """Loss weight per token of x [B, N]: w for assistant answer tokens (after
    <｜Assistant｜></think> up to and including <｜end▁of▁sentence｜>), 1 elsewhere."""
    out = torch.ones(x.shape)
    if w == 1.0:
        return out
    for b, row in enumerate(x.tolist()):
        ans, prev = False, -1
        for i, t in enumerate(row):
            if ans:
                out[b, i] = w
            if t == eos:
                ans = False
            if prev == assistant and t == think_end:
                ans = True
            prev = t
    return out


def lr_at(step, steps, peak, warm):
    if step < warm:
        return peak * (step + 1) / warm
    t = (step - warm) / max(1, steps - warm)
    return peak * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, t))))


def export(net, tok, out, info):
    os.makedirs(out, exist_ok=True)
    M.write_checkpoint(net, out, "bf16", {"trained_steps": str(info["step"])})
    tok.write(out)
    with open(os.path.join(out, "training.json"), "w") as f:
        json.dump(info, f, indent=2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--work", default="build/train")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--steps", type=int, default=3000)
    ap.add_argument("--max-minutes", type=float, default=0.0, help="stop after M minutes in all (0: no limit)")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=512)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--bias-rate", type=float, default=0.01)
    ap.add_argument("--p-dialogue", type=float, default=0.55)
    ap.add_argument("--dialogues", type=int, default=12000)
    ap.add_argument("--answer-weight", type=float, default=1.0, help="loss weight of assistant answer tokens")
    ap.add_argument("--hidden", type=int, default=192)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--ckpt-minutes", type=float, default=5.0)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--data-only", action="store_true")
    a = ap.parse_args()

    torch.set_num_threads(a.threads)
    random.seed(a.seed)
    np.random.seed(a.seed)
    torch.manual_seed(a.seed)
    ck = os.path.join(a.work, f"ckpt-{a.seed}.pt")
    if a.resume and not os.path.exists(ck):
        print(f"train.py: --resume: no checkpoint {ck}", file=sys.stderr)
        return 1
    tok, d = build_data(a.work, a.seed, a.dialogues)
    if a.data_only:
        return 0
    cfg = M.make_config(tok.vocab_size, tok.added[T.BOS], tok.added[T.EOS], hidden=a.hidden)
    net = M.Model(cfg)
    opt = torch.optim.AdamW(net.parameters(), lr=a.lr, betas=(0.9, 0.95), weight_decay=0.01)
    data = Batches(d, a.seq, a.p_dialogue, a.seed)
    step, tokens, elapsed0 = 0, 0, 0.0
    phases = []  # the flags of earlier phases, from the checkpoint
    if a.resume:
        s = torch.load(ck)
        phases = s.get("phases", [])
        net.load_state_dict(s["model"])
        opt.load_state_dict(s["opt"])
        step, tokens, elapsed0 = s["step"], s["tokens"], s["elapsed"]
        data.r.setstate(s["data_rng"])
        data.order, data.di, data.pp = s["data_pos"]
        torch.set_rng_state(s["torch_rng"])
        log(f"resumed at step {step}")
    log(f"model: {M.n_params(cfg) / 1e6:.2f}M trained params, {M.n_params(cfg, False) / 1e6:.2f}M stored; "
        f"{a.steps} steps of {a.batch}x{a.seq} tokens" + (f"; stop after {a.max_minutes} min" if a.max_minutes else ""))
    phase = {"from_step": step, "steps": a.steps, "lr": a.lr, "warmup": a.warmup, "p_dialogue": a.p_dialogue,
             "answer_weight": a.answer_weight, "batch": a.batch, "seq": a.seq, "threads": a.threads}
    t0 = time.time() - elapsed0
    last_ck = time.time()
    moes = net.moe_layers()
    ema = None
    info = {}
    while step < a.steps:
        if a.max_minutes and (time.time() - t0) / 60 > a.max_minutes:
            log(f"time limit: stopping at step {step} of {a.steps}")
            break
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps, a.lr, a.warmup)
        x = data.batch(a.batch)
        logits, mtp = net(x[:, :-1])
        V = logits.shape[-1]
        w = answer_weights(x, tok.added["<｜Assistant｜>"], tok.added["</think>"], tok.added[T.EOS], a.answer_weight)
        ce = F.cross_entropy(logits.reshape(-1, V), x[:, 1:].reshape(-1), reduction="none")
        loss_main = (ce * w[:, 1:].reshape(-1)).sum() / w[:, 1:].sum()
        ce = F.cross_entropy(mtp.reshape(-1, V), x[:, 2:].reshape(-1), reduction="none")
        loss_mtp = (ce * w[:, 2:].reshape(-1)).sum() / w[:, 2:].sum()
        loss = loss_main + a.mtp_weight * loss_mtp
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(net.parameters(), 1.0)
        opt.step()
        with torch.no_grad():
            for moe in moes:  # aux-loss-free balancing (DeepSeek-V3 §2.1.2)
                load = moe.last_load.float()
                moe.gate.e_score_correction_bias += a.bias_rate * torch.sign(load.mean() - load)
        step += 1
        tokens += x[:, 1:].numel()
        lm = float(loss_main)
        ema = lm if ema is None else 0.95 * ema + 0.05 * lm
        if step % 10 == 0 or step == 1:
            el = time.time() - t0
            imb = max(float(m.last_load.max()) / float(m.last_load.float().mean()) for m in moes)
            log(f"step {step} loss {lm:.3f} (ema {ema:.3f}) mtp {float(loss_mtp):.3f} lr {opt.param_groups[0]['lr']:.2e} "
                f"max-load/mean {imb:.2f} {tokens / el:.0f} tok/s {el / 60:.1f} min")
        info = {"step": step, "steps_planned": a.steps, "tokens": tokens, "minutes": (time.time() - t0) / 60,
                "loss_ema": ema, "seed": a.seed, "batch": a.batch, "seq": a.seq, "lr": a.lr,
                "mtp_weight": a.mtp_weight, "bias_rate": a.bias_rate, "threads": a.threads,
                "p_dialogue": a.p_dialogue, "answer_weight": a.answer_weight,
                "phases": phases + [dict(phase, to_step=step)]}
        if time.time() - last_ck > a.ckpt_minutes * 60 or step == a.steps:
            torch.save({"model": net.state_dict(), "opt": opt.state_dict(), "step": step, "tokens": tokens,
                        "elapsed": time.time() - t0, "data_rng": data.r.getstate(),
                        "data_pos": (data.order, data.di, data.pp), "torch_rng": torch.get_rng_state(),
                        "phases": info["phases"]}, ck + ".tmp")
            os.replace(ck + ".tmp", ck)
            export(net, tok, a.out, info)
            last_ck = time.time()
            log(f"checkpoint at step {step} -> {a.out}")
    if info:
        export(net, tok, a.out, info)
    log(f"done: {step} steps, {tokens} tokens")
    return 0


if __name__ == "__main__":
    sys.exit(main())
