#!/usr/bin/env bash
# Installs the Debian packages deepinfer needs, only those that are missing.
#   scripts/deps.sh          build dependencies (compiler, libraries)
#   scripts/deps.sh test     + what the tests need (PyTorch reference, Node for oracles, clang)
set -euo pipefail
want=(gcc make pkg-config libjansson-dev libpcre2-dev libxxhash-dev libutf8proc-dev libmicrohttpd-dev)
if [ "${1:-}" = "test" ]; then
  want+=(python3 python3-torch python3-numpy nodejs npm clang clang-format)
fi
missing=()
for p in "${want[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# npm may come with Node from elsewhere; accept any npm on PATH.
if command -v npm >/dev/null 2>&1; then
  keep=(); for p in "${missing[@]}"; do [ "$p" = npm ] || [ "$p" = nodejs ] || keep+=("$p"); done
  missing=("${keep[@]+"${keep[@]}"}")
fi
[ ${#missing[@]} -eq 0 ] && exit 0
echo "deps: installing ${missing[*]}" >&2
SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
