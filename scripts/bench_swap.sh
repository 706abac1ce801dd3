#!/usr/bin/env bash
# bench_swap.sh — preemption under KV pressure: llama-1b bf16, 16 concurrent
# requests (32 in all, replies at half length) in a KV pool of 24 blocks
# (96 MiB), preempting by recomputation, then with 512 MiB of swap space.
# Prints both levels and the swap run's output tokens/s over the whole run
# (preemption makes the steady-state column noisy) and tokens put through
# the model against the recomputing run's, measured back to back.
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=build/deepinfer
MODEL=build/models/llama-1b
run() {
  $BIN bench --serving --model "$MODEL" --threads "${THREADS:-2}" --concurrency 16 --requests 32 \
    --seed 1 --output-scale 0.5 --kv-memory 96 --no-ttft --no-invariant-overhead "$@"
}
recompute=$(run) || exit 1
swap=$(run --swap-space 512) || exit 1
level() { grep -E '^ +16 ' <<<"$1" | awk '{print $4}'; }
tokens() { grep -o '[0-9]* tokens through the model' <<<"$1" | awk '{print $1}'; }
echo "recompute:"
grep -E '^ +16 |preemptions' <<<"$recompute"
echo "swap space 512 MiB:"
grep -E '^ +16 |preemptions' <<<"$swap"
awk -v a="$(level "$swap")" -v b="$(level "$recompute")" -v ta="$(tokens "$swap")" \
  -v tb="$(tokens "$recompute")" 'BEGIN {
    printf "swap space vs recompute: output %.2f vs %.2f tok/s over the run = %.2fx; tokens through the model %d vs %d = %.2fx\n",
      a, b, (b > 0 ? a / b : 0), ta, tb, (tb > 0 ? ta / tb : 0) }'
