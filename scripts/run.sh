#!/usr/bin/env bash
# `make run`: makes the bundled default model if it is missing, then streams a
# generation from it. Until the trained default model lands (models/), the
# default is a random-weight DeepSeek-style model (MLA + MoE + sliding-window
# layers) made by tools/make_model.py: it exercises the whole stack, but its
# text is noise.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/deps.sh test
MODEL="${MODEL:-build/models/hybrid-tiny}"
if [ ! -f "$MODEL/config.json" ]; then
  /usr/bin/python3 tools/make_model.py --preset all-tiny --out build/models
fi
PROMPT="${PROMPT:-The quick brown fox}"
exec build/deepinfer generate --model "$MODEL" --prompt "$PROMPT" --max-tokens "${MAX_TOKENS:-64}" ${ARGS:-}
