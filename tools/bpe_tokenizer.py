"""Deterministic byte-level BPE trainer for the project's test models.

Owns: training a small GPT-2/Llama-3 style byte-level BPE on fixed text and
writing it as a Hugging Face `tokenizer.json` + `tokenizer_config.json`.
Why shaped so: the tiny test models need a *real* tokenizer in the format the
C tokenizer and the npm oracles read, but nothing may be downloaded, so we
train one here. Training is pure Python, deterministic (ties broken by the
lexicographically smallest pair) and takes well under a second.

The pre-tokenizer written to tokenizer.json is the Llama-3 / DeepSeek-V3
regex with Unicode properties. Python's `re` has no \\p{..}, so training uses
an equivalent ASCII-safe translation (exact for the ASCII training text).
"""

import json
import re

# Llama 3 / DeepSeek V3 style split regex, as stored in tokenizer.json.
SPLIT_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The same with Python `re` classes: \p{L} = [^\W\d_], \p{N} = \d.
_PY_SPLIT = re.compile(
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|(?:[^\r\n\w]|_)?[^\W\d_]+|\d{1,3}"
    r"| ?(?:[^\s\w]|_)+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)

SPECIAL_TOKENS = [
    "<｜begin▁of▁sentence｜>",
    "<｜end▁of▁sentence｜>",
    "<｜User｜>",
    "<｜Assistant｜>",
    "<think>",
    "</think>",
    # DeepSeek's fill-in-the-middle markers (completions' suffix)
    "<｜fim▁hole｜>",
    "<｜fim▁begin｜>",
    "<｜fim▁end｜>",
]
BOS, EOS = SPECIAL_TOKENS[0], SPECIAL_TOKENS[1]

CHAT_TEMPLATE = (
    "{% set ns = namespace(system='') %}"
    "{% for message in messages %}{% if message['role'] == 'system' %}"
    "{% set ns.system = ns.system + message['content'] %}{% endif %}{% endfor %}"
    "{{ bos_token }}{{ ns.system }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '<｜User｜>' + message['content'] }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ '<｜Assistant｜>' + message['content'] + '<｜end▁of▁sentence｜>' }}"
    "{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<｜Assistant｜>' }}{% endif %}"
)

TRAINING_TEXT = r'''
The quick brown fox jumps over the lazy dog. A language model reads a prompt,
turns it into tokens, and predicts the next token one step at a time. When the
user asks a question, the assistant thinks about the answer and then writes it.
Inference servers keep the key and value cache of every request in blocks, so
that a shared prefix is computed only once and reused by many requests.
Hello, world! How are you today? I am fine, thank you. What is the time now?
It is 10:45 in the morning, and the weather is nice. Let's write some code.
The model has 64 hidden units, 4 heads and 2 layers; it was made for tests.
Mixture of experts models route each token to a few experts out of many.
They're sure we'll see that it's done, and you've read what I'd said.

def forward(self, x, positions):
    h = self.embed(x)
    for layer in self.layers:
        h = h + layer.attention(self.norm(h), positions)
        h = h + layer.mlp(self.post_norm(h))
    return self.lm_head(self.final_norm(h))

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE\n", argv[0]);
        return 1;
    }
    for (int i = 0; i < n; i++) {
        sum += a[i] * b[i];
    }
    return 0;
}

{"model": "deepseek", "messages": [{"role": "user", "content": "Hi there"}],
 "stream": true, "max_tokens": 128, "temperature": 0.7}

function add(a, b) { return a + b; }
const result = await fetch("/v1/chat/completions", { method: "POST" });
for i in range(10):
    print(i, i * i, "done")
SELECT name, count(*) FROM users WHERE age > 18 GROUP BY name;
Numbers: 0 1 2 3 4 5 6 7 8 9 10 100 1000 2024 3.14159 42 -7 1e-5
'''


def bytes_to_unicode():
    """GPT-2's reversible byte -> printable unicode character mapping."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {b: chr(c) for b, c in zip(bs, cs)}


BYTE_TO_UNI = bytes_to_unicode()
UNI_TO_BYTE = {v: k for k, v in BYTE_TO_UNI.items()}


def pretokenize(text):
    return _PY_SPLIT.findall(text)


def train(text=TRAINING_TEXT, vocab_size=500):
    """Returns (vocab: dict token->id, merges: list of (a, b)). Byte tokens take
    ids 0..255 in byte order; merges follow in the order learned."""
    vocab = {BYTE_TO_UNI[b]: b for b in range(256)}
    words = {}
    for piece in pretokenize(text):
        w = tuple(BYTE_TO_UNI[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    words = [[list(w), c] for w, c in sorted(words.items())]
    merges = []
    while len(vocab) < vocab_size:
        counts = {}
        for syms, c in words:
            for i in range(len(syms) - 1):
                p = (syms[i], syms[i + 1])
                counts[p] = counts.get(p, 0) + c
        if not counts:
            break
        best = min(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0]
        merged = best[0] + best[1]
        if merged in vocab:  # same string reached by another split: skip pair
            pass
        else:
            vocab[merged] = len(vocab)
        merges.append(best)
        for w in words:
            syms = w[0]
            i, out = 0, []
            while i < len(syms):
                if i < len(syms) - 1 and syms[i] == best[0] and syms[i + 1] == best[1]:
                    out.append(merged)
                    i += 2
                else:
                    out.append(syms[i])
                    i += 1
            w[0] = out
    return vocab, merges


def encode(text, vocab, merges):
    """Plain-text encoding (no special tokens), for tests of this module."""
    ranks = {m: i for i, m in enumerate(merges)}
    ids = []
    for piece in pretokenize(text):
        syms = [BYTE_TO_UNI[b] for b in piece.encode("utf-8")]
        while len(syms) > 1:
            cand = [(ranks.get((syms[i], syms[i + 1]), 1 << 30), i) for i in range(len(syms) - 1)]
            r, i = min(cand)
            if r == 1 << 30:
                break
            syms[i : i + 2] = [syms[i] + syms[i + 1]]
        ids.extend(vocab[s] for s in syms)
    return ids


def decode(ids, vocab):
    inv = {v: k for k, v in vocab.items()}
    out = bytearray()
    for i in ids:
        tok = inv.get(i)
        if tok is None:
            continue
        if tok in SPECIAL_TOKENS:
            out += tok.encode("utf-8")
        else:
            out += bytes(UNI_TO_BYTE[ch] for ch in tok)
    return out.decode("utf-8", errors="replace")


def tokenizer_json(vocab, merges):
    """The tokenizer.json document; special tokens follow the BPE vocab."""
    base = len(vocab)
    added = [
        {
            "id": base + i,
            "content": t,
            "single_word": False,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": True,
        }
        for i, t in enumerate(SPECIAL_TOKENS)
    ]
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {
            "type": "Sequence",
            "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": SPLIT_REGEX}, "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
            ],
        },
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [a + " " + b for a, b in merges],
        },
    }


def tokenizer_config(n_bpe):
    decoder = {
        str(n_bpe + i): {
            "content": t,
            "lstrip": False,
            "normalized": False,
            "rstrip": False,
            "single_word": False,
            "special": True,
        }
        for i, t in enumerate(SPECIAL_TOKENS)
    }
    return {
        "add_bos_token": False,
        "add_eos_token": False,
        "added_tokens_decoder": decoder,
        "bos_token": BOS,
        "eos_token": EOS,
        "pad_token": EOS,
        "clean_up_tokenization_spaces": False,
        "legacy": True,
        "model_max_length": 16384,
        "tokenizer_class": "LlamaTokenizerFast",
        "chat_template": CHAT_TEMPLATE,
    }


_CACHE = {}


def trained(vocab_size=500):
    if vocab_size not in _CACHE:
        _CACHE[vocab_size] = train(vocab_size=vocab_size)
    return _CACHE[vocab_size]


def write(dirpath, vocab_size=500):
    """Writes tokenizer.json and tokenizer_config.json; returns the special
    token ids {token: id}."""
    vocab, merges = trained(vocab_size)
    with open(f"{dirpath}/tokenizer.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_json(vocab, merges), f, ensure_ascii=False, indent=1)
    with open(f"{dirpath}/tokenizer_config.json", "w", encoding="utf-8") as f:
        json.dump(tokenizer_config(len(vocab)), f, ensure_ascii=False, indent=1)
    return {t: len(vocab) + i for i, t in enumerate(SPECIAL_TOKENS)}
