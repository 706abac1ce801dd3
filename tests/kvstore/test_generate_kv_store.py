"""`deepinfer generate --kv-store DIR`: a second run of the same prompt takes
its whole-block prefix from the store (stderr says how many tokens came from
it) and prints the same greedy text as the first, computed run; the
sliding-window model rebuilds its rings by replay. Blocks of one KV dtype are
never read by a run with another (the store's fingerprint includes it), and
bf16 blocks restore as exactly as f32 ones. Prints "N passed, N failed"."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyharness import run_cases  # noqa: E402

BIN = os.environ.get("DI_BIN", "build/deepinfer")
MODELS = os.environ.get("DI_TEST_MODELS", "build/models")
PROMPT = " ".join(f"the quick brown fox jumps over the lazy dog {i}" for i in range(30))


def run(model, store, kv="auto"):
    p = subprocess.run([BIN, "generate", "--model", model, "--prompt", PROMPT, "--max-tokens", "6",
                        "--dtype", "f32", "--kv-dtype", kv, "--threads", "1", "--ignore-eos",
                        "--kv-store", store],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode(errors="replace")
    m = re.search(rb"kv store: (\d+) prompt tokens: (\d+) from the store", p.stderr)
    assert m, p.stderr.decode(errors="replace")
    return p.stdout, int(m.group(1)), int(m.group(2))


def case(preset):
    model = os.path.join(MODELS, preset)
    if not os.path.isdir(model):
        return
    with tempfile.TemporaryDirectory() as store:
        out1, n1, hit1 = run(model, store)
        out2, n2, hit2 = run(model, store)
    assert hit1 == 0, f"{preset}: first run took {hit1} tokens from an empty store"
    assert n2 == n1 and hit2 == (n1 - 1) // 128 * 128 and hit2 > 0, f"{preset}: hit {hit2} of {n2}"
    assert out1 == out2, f"{preset}: the store hit changed the greedy text: {out1!r} vs {out2!r}"


def kv_dtype_case(preset):
    model = os.path.join(MODELS, preset)
    if not os.path.isdir(model):
        return
    with tempfile.TemporaryDirectory() as store:
        run(model, store, "f32")
        out1, _, hit1 = run(model, store, "bf16")
        out2, _, hit2 = run(model, store, "bf16")
    assert hit1 == 0, f"{preset}: a bf16-KV run took {hit1} tokens stored by an f32-KV run"
    assert hit2 > 0 and out1 == out2, f"{preset}: bf16 KV: hit {hit2}, {out1!r} vs {out2!r}"


def main():
    cases = [(case, p) for p in ["llama3-tiny", "hybrid-tiny", "dsv2-tiny"]]
    cases += [(kv_dtype_case, p) for p in ["llama3-tiny", "dsv2-tiny"]]
    return run_cases([(f"{fn.__name__} {preset}", fn, (preset,)) for fn, preset in cases])


if __name__ == "__main__":
    sys.exit(main())
