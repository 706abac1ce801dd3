#!/usr/bin/env bash
# `make bench`: every benchmark, each printing its figure and its fraction of
# the machine's limit (or its ratio to a baseline) measured in the same run.
# The 1B-scale benchmark models are made once into build/models (a few GB).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=build/deepinfer
MODELS=build/models
THREADS="${THREADS:-2}"
for p in llama-1b dsv3-1b; do
  [ -f "$MODELS/$p/config.json" ] || /usr/bin/python3 tools/make_model.py --preset "$p" --out "$MODELS/$p" || exit 1
done
echo "== kernels"
$BIN bench --kernels --threads "$THREADS" || true
# --pack-cache: bf16 read from a copy packed in the layout of the vector lanes
# (AVX2 without AVX-512 BF16; elsewhere the same run as the first), kept in
# build/pack-cache: the first `make bench` packs and writes it, later ones map it.
PACK="--pack-cache build/pack-cache"
for spec in "llama-1b bf16" "llama-1b bf16 $PACK" "llama-1b int8" "dsv3-1b bf16"; do
  set -- $spec
  echo "== $1, --dtype $2 ${3:-} ${4:-}, $THREADS threads"
  $BIN bench --model "$MODELS/$1" --dtype "$2" ${3:-} ${4:-} --threads "$THREADS" --batch 8 --prompt-len 512 --gen-len 32
done
# CPU scale: prompts and replies at a quarter of the workload's lengths (the
# same mix of prefill and decode) and a 10 s step budget (a prefill step of a
# whole wave of prompts takes seconds on 2 cores).
echo "== serving, llama-1b bf16, $THREADS threads"
$BIN bench --serving --model "$MODELS/llama-1b" --dtype bf16 --threads "$THREADS" \
  --concurrency 1,4,16,64 --seed 1 --prompt-scale 0.25 --output-scale 0.25 --max-output 256 --step-ms 10000 \
  --invariant-concurrency 1,16 || true
echo "== serving, llama-1b bf16 $PACK, $THREADS threads: 16 against 1"
$BIN bench --serving --model "$MODELS/llama-1b" --dtype bf16 $PACK --threads "$THREADS" \
  --concurrency 1,16 --seed 1 --prompt-scale 0.25 --output-scale 0.25 --max-output 256 --step-ms 10000 \
  --no-ttft --no-invariant-overhead || true
echo "== API server under load: 64 concurrent streams, 10,000 requests (dsv3-tiny)"
[ -f "$MODELS/dsv3-tiny/config.json" ] || /usr/bin/python3 tools/make_model.py --preset all-tiny --out "$MODELS"
node tools/loadgen.mjs --model "$MODELS/dsv3-tiny" --concurrency 64 --requests 10000
for extra in scripts/bench_*.sh; do
  [ -x "$extra" ] || continue
  echo "== $(basename "$extra" .sh)"
  "$extra"
done
