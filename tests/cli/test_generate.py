"""`deepinfer generate --grammar / --grammar-file`: greedy and sampled
continuations on the tiny models, each a whole text of the grammar's
(a finite language, checked by a Python regular expression written apart;
without the grammar the same runs do not match it), one from a file; a
grammar that does not compile is refused with its reason and line, and a
grammar beside --ignore-eos is a usage error. Seconds. Prints
"N passed, N failed"."""
import os
import re
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from pyharness import run_cases  # noqa: E402

BIN = os.environ.get("DI_BIN", "build/deepinfer")
MODELS = os.environ.get("DI_TEST_MODELS", "build/models")

GRAMMAR = r'''
root ::= answer ", " reason "."   # a comment
answer ::= "yes" | "no" | "maybe"
reason ::= [a-z] [a-z ]{2,15}
    | "see \"" [0-9]{1,3} "\""
'''
WHOLE = re.compile(r'(yes|no|maybe), ([a-z][a-z ]{2,15}|see "[0-9]{1,3}")\.')


def generate(preset, *args):
    p = subprocess.run([BIN, "generate", "--model", os.path.join(MODELS, preset), "--prompt",
                        "Is it so?", "--max-tokens", "64", "--threads", "2", *args],
                       capture_output=True, timeout=120)
    return p.returncode, p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")


def held_case(preset):
    held = free = 0
    for seed in range(4):
        sampling = ["--temperature", "1.0", "--seed", str(seed)] if seed else []
        rc, out, err = generate(preset, "--grammar", GRAMMAR, *sampling)
        assert rc == 0, err
        text = out[:-1]  # generate ends its output with a newline
        assert WHOLE.fullmatch(text), f"seed {seed}: {text!r}"
        held += 1
        rc, out, err = generate(preset, *sampling)
        free += rc == 0 and WHOLE.fullmatch(out[:-1]) is not None
    assert held == 4 and free == 0, f"{free} free runs matched the grammar"


def file_case(preset):
    with tempfile.NamedTemporaryFile("w", suffix=".gbnf", delete=False) as f:
        f.write(GRAMMAR)
    try:
        rc, out, err = generate(preset, "--grammar-file", f.name, "--temperature", "0.7")
        assert rc == 0 and WHOLE.fullmatch(out[:-1]), (out, err)
    finally:
        os.unlink(f.name)


def refused_case(preset):
    rc, out, err = generate(preset, "--grammar", 'root ::= "a"\nroot ::= b')
    assert rc == 1 and "--grammar: line 2: rule 'root' is defined twice" in err, err
    rc, out, err = generate(preset, "--grammar", "root ::= x\nx ::= x \"a\" | \"b\"")
    assert rc == 1 and "rule 'x' is left-recursive" in err, err
    rc, out, err = generate(preset, "--grammar-file", "/nonexistent.gbnf")
    assert rc == 1 and "/nonexistent.gbnf" in err, err
    rc, out, err = generate(preset, "--grammar", 'root ::= "a"', "--ignore-eos")
    assert rc == 2 and "--ignore-eos" in err, err


def main():
    cases = [(held_case, ("llama3-tiny",)), (held_case, ("dsv3-tiny",)),
             (file_case, ("qwen3-tiny",)), (refused_case, ("llama3-tiny",))]
    return run_cases([(f"{fn.__name__} {' '.join(args)}", fn, args) for fn, args in cases])


if __name__ == "__main__":
    sys.exit(main())
