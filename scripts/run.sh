#!/usr/bin/env bash
# `make run`: installs what is missing, then starts the API server on the
# bundled default model (models/deepinfer-tiny-moe, trained by
# `make train-default`). If that model is absent, falls back to a
# random-weight DeepSeek-style test model (MLA + MoE + sliding-window layers)
# made by tools/make_model.py: it exercises the whole stack, but its text is
# noise. MODEL, PORT, HOST and ARGS override the defaults.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
MODEL="${MODEL:-models/deepinfer-tiny-moe}"
if [ ! -f "$MODEL/config.json" ]; then
  MODEL=build/models/hybrid-tiny
  [ -f "$MODEL/config.json" ] || /usr/bin/python3 tools/make_model.py --preset all-tiny --out build/models
fi
HOST="${HOST:-127.0.0.1}" PORT="${PORT:-8000}"
cat <<MSG
deepinfer: serving $MODEL on http://$HOST:$PORT (Ctrl-C stops)
try:  curl -s http://$HOST:$PORT/v1/chat/completions -H 'content-type: application/json' \\
        -d '{"model":"deepinfer","messages":[{"role":"user","content":"Hello!"}],"max_tokens":32}'
MSG
exec build/deepinfer serve --model "$MODEL" --host "$HOST" --port "$PORT" --served-model-name deepinfer ${ARGS:-}
