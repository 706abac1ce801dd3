#!/usr/bin/env bash
# Runs every test suite and prints one total last ("N passed, N failed").
#   unit        build/asan/test_unit (C unit tests under ASan+UBSan)
#   python      tests/**/test_*.py   (PyTorch reference and tool-side tests; each prints "N passed, N failed")
#   node        tests/**/*.test.mjs  (external oracles: HF tokenizers, Jinja templates, SDKs; node --test)
#   format      clang-format --dry-run over the C sources
# Set TESTS=format,unit,python,node to run a subset; FILTER=substring narrows unit tests.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=/usr/bin/python3
export DI_TEST_MODELS="${DI_TEST_MODELS:-$PWD/build/models}"
export DI_BIN="${DI_BIN:-$PWD/build/deepinfer}"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
TESTS="${TESTS:-format,unit,python,node}"
total_pass=0; total_fail=0; broken=()

count() { # suite-name, log file, exit code
  local name=$1 log=$2 rc=$3 p f
  if line=$(grep -E '^[0-9]+ passed, [0-9]+ failed' "$log" | tail -n1) && [ -n "$line" ]; then
    p=$(echo "$line" | sed -E 's/^([0-9]+) passed.*/\1/'); f=$(echo "$line" | sed -E 's/.* ([0-9]+) failed.*/\1/')
  elif grep -qE '^# pass [0-9]+' "$log"; then
    p=$(grep -E '^# pass ' "$log" | tail -n1 | awk '{print $3}'); f=$(grep -E '^# fail ' "$log" | tail -n1 | awk '{print $3}')
  else
    p=0; f=1
  fi
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi   # a crash after the summary still fails
  total_pass=$((total_pass + p)); total_fail=$((total_fail + f))
  [ "$f" -ne 0 ] && broken+=("$name")
  printf '%-40s %4d passed, %4d failed\n' "$name" "$p" "$f"
}

mkdir -p build/test-logs
# Test models are made once; make_model.py skips presets that are up to date.
if ! $PY tools/make_model.py --preset all-tiny --out "$DI_TEST_MODELS" > build/test-logs/models.log 2>&1; then
  cat build/test-logs/models.log; echo "0 passed, 1 failed"; exit 1
fi

if [[ $TESTS == *format* ]] && command -v clang-format >/dev/null; then
  # Style is part of the build: every C file is clang-format clean.
  git ls-files 'src/*.[ch]' 'tests/unit/*.[ch]' 'tests/fuzz/*.[ch]' | xargs clang-format --dry-run --Werror \
    > build/test-logs/format.log 2>&1; rc=$?
  [ $rc -ne 0 ] && grep -E '^(src|tests)/' build/test-logs/format.log | cut -d: -f1 | sort -u
  if [ $rc -eq 0 ]; then echo "1 passed, 0 failed"; else echo "0 passed, 1 failed"; fi >> build/test-logs/format.log
  count clang-format build/test-logs/format.log $rc
fi
if [[ $TESTS == *unit* ]]; then
  build/asan/test_unit ${FILTER:-} > build/test-logs/unit.log 2>&1; rc=$?
  grep -E '^(not ok|  FAIL)' build/test-logs/unit.log
  count unit build/test-logs/unit.log $rc
fi
if [[ $TESTS == *python* ]]; then
  for t in $(find tests -name 'test_*.py' | sort); do
    log=build/test-logs/$(echo "$t" | tr / _).log
    $PY "$t" > "$log" 2>&1; rc=$?
    [ $rc -ne 0 ] && tail -n 30 "$log"
    count "$t" "$log" $rc
  done
fi
if [[ $TESTS == *node* ]]; then
  for d in $(find tests -name package.json -not -path '*/node_modules/*' -exec dirname {} \; | sort); do
    if [ ! -d "$d/node_modules" ] || [ "$d/package.json" -nt "$d/node_modules" ]; then
      (cd "$d" && npm install --no-audit --no-fund --loglevel=error > /dev/null) || { echo "npm install failed in $d"; total_fail=$((total_fail+1)); continue; }
      touch "$d/node_modules"
    fi
  done
  for t in $(find tests -name '*.test.mjs' -not -path '*/node_modules/*' | sort); do
    log=build/test-logs/$(echo "$t" | tr / _).log
    node --test --test-reporter=tap "$t" > "$log" 2>&1; rc=$?
    [ $rc -ne 0 ] && grep -E '^\s*not ok|error|Error' "$log" | head -n 30
    count "$t" "$log" $rc
  done
fi
[ ${#broken[@]} -gt 0 ] && echo "failing suites: ${broken[*]}"
echo "$total_pass passed, $total_fail failed"
[ "$total_fail" -eq 0 ]
