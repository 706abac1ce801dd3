#!/usr/bin/env bash
# Tokenizer benchmark (run by scripts/bench.sh / `make bench`): single-thread
# MB/s of deepinfer's tokenizer next to the Hugging Face Rust tokenizers on the
# conformance corpus, and the 2-thread speed-up of parallel encoding on a
# ~1M-token text. Needs build/deepinfer and the npm packages of the
# tokenizer conformance suite (installed here when missing).
set -euo pipefail
cd "$(dirname "$0")/.."
d=tests/conformance/tokenizer
if [ ! -d "$d/node_modules/@anush008/tokenizers" ] || [ "$d/package.json" -nt "$d/node_modules" ]; then
  (cd "$d" && npm install --no-audit --no-fund --loglevel=error > /dev/null)
  touch "$d/node_modules"
fi
[ -x build/deepinfer ] || make build/deepinfer
exec node tools/bench_tokenizer.mjs
