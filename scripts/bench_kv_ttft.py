#!/usr/bin/python3
"""bench_kv_ttft.py — TTFT of a long prompt served from the persistent KV
store (`deepinfer serve --kv-store`) vs computed from scratch.

Starts `deepinfer serve` on an empty store directory, sends one prompt of
about --tokens tokens (max_tokens 1: the latency is the time to first
token), stops the server (the store is flushed on shutdown), starts a new
one on the same directory and sends the same prompt again: now every whole
block but the last comes from the store (the in-memory prefix cache is empty
after the restart). Prints both latencies and their ratio (target <= 0.20).

Usage: scripts/bench_kv_ttft.py [--model DIR] [--tokens 4096] [--dtype f32]
"""
import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request


def start(args, store):
    cmd = [args.bin, "serve", "--model", args.model, "--dtype", args.dtype, "--port", "0",
           "--kv-store", store, "--kv-memory", str(args.kv_mib)]
    p = subprocess.Popen(cmd, stderr=subprocess.PIPE, text=True)
    for line in p.stderr:
        m = re.search(r"listening on http://[^:]+:(\d+)", line)
        if m:
            return p, int(m.group(1))
    p.wait()
    sys.exit("deepinfer serve did not start")


def stop(p):
    p.send_signal(2)  # SIGINT: clean shutdown flushes the store's queued writes
    p.wait(timeout=120)


def ask(port, prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1, "temperature": 0}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                 {"content-type": "application/json"})
    t0 = time.monotonic()
    with urllib.request.urlopen(req, timeout=3600) as r:
        out = json.load(r)
    return time.monotonic() - t0, out["usage"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="build/models/llama-1b")
    ap.add_argument("--bin", default="build/deepinfer")
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--dtype", default="f32")
    ap.add_argument("--kv-mib", type=int, default=2048)
    args = ap.parse_args()
    store = tempfile.mkdtemp(prefix="di_kv_ttft_")
    p = None
    try:
        # Words of the form "w123" tokenize to a few tokens each: grow the
        # prompt until the server reports about --tokens prompt tokens.
        p, port = start(args, store)
        n_words = args.tokens // 3
        prompt = " ".join(f"w{i}" for i in range(n_words))
        # Calibrate on a short prompt that shares no prefix with the real one.
        _, u = ask(port, "x " + prompt[: len(prompt) // 8])
        per_word = u["prompt_tokens"] / max(1, n_words // 8)
        n_words = int(args.tokens / per_word)
        prompt = " ".join(f"w{i}" for i in range(n_words))
        cold, u1 = ask(port, prompt)
        stop(p)
        p, port = start(args, store)
        warm, u2 = ask(port, prompt)
        stop(p)
        print(f"kv-store TTFT, {u1['prompt_tokens']}-token prompt ({args.model}, {args.dtype}):")
        print(f"  computed from scratch: {cold * 1000:9.1f} ms")
        print(f"  from the store:        {warm * 1000:9.1f} ms "
              f"({u2['prompt_tokens_details']['cached_tokens']} tokens cached)")
        print(f"  ratio: {warm / cold:.3f} (target <= 0.20)")
    finally:
        if p and p.poll() is None:
            p.kill()  # interrupted mid-run: leave no server behind
        shutil.rmtree(store, ignore_errors=True)


if __name__ == "__main__":
    main()
