#!/usr/bin/env bash
# KV store benchmark (run by scripts/bench.sh / `make bench`):
#  1. store write/read bandwidth at the real block size (the llama-1b bench
#     model's f32 KV block when present, else 4 MiB) with random access,
#     beside the raw bandwidth of the same disk in the same run (target >= 70 %);
#  2. the kv-sim trace simulator: input-token hit rate per traffic class with
#     the default TTLs (agent 3 d, chat 7 d), other TTL choices on the same
#     trace, and the same under a capacity bound;
#  3. TTFT of a 4,096-token prompt served from the store after a restart vs
#     computed from scratch (scripts/bench_kv_ttft.py; target <= 20 %), on
#     llama3-tiny and, when the llama-1b bench model exists, on llama-1b
#     (its cold 4,096-token prefill takes about 90 s on 2 cores; set
#     KV_TTFT_1B=0 to skip it).
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=build/deepinfer
[ -x "$BIN" ] || make "$BIN"
model=build/models/llama-1b
if [ -f "$model/config.json" ]; then
  "$BIN" kv-bench --model "$model" --dir build/kv-bench
else
  "$BIN" kv-bench --block-bytes 4M --dir build/kv-bench
fi
echo
"$BIN" kv-sim --compare
echo
"$BIN" kv-sim --capacity 1T --block-bytes 9M
echo
# llama3-tiny: seconds on 2 cores. A small model is the harder case for the
# ratio: less compute for the store's reads to save.
/usr/bin/python3 scripts/bench_kv_ttft.py --model build/models/llama3-tiny
# llama-1b: the real block size (8 MiB of f32 KV per 128 tokens); bf16
# weights (2.5 GB; f32 would need 4.5 GB).
if [ -f "$model/config.json" ] && [ "${KV_TTFT_1B:-1}" != 0 ]; then
  echo
  /usr/bin/python3 scripts/bench_kv_ttft.py --model "$model" --dtype bf16
fi
