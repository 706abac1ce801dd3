"""The default model's tokenizer: byte-level BPE trained on the corpus, with
DeepSeek-style special tokens and the DSML tags as added tokens.

Owns: an incremental BPE trainer (same algorithm and tie rule as
tools/bpe_tokenizer.py -- most frequent pair, ties to the smallest pair --
but with pair counts updated per merge, so a few thousand merges over
megabytes of text take seconds, not hours), trusted encoding (added tokens
split out leftmost-longest, the rest BPE'd piece by piece with a cache) and
writing tokenizer.json / tokenizer_config.json.

Why shaped so: the file format, pre-tokenizer regex and byte mapping are
tools/bpe_tokenizer.py's, so deepinfer's tokenizer and the npm oracles read
it like the test tokenizers. The fixed DSML tags and <think>/</think> are
non-special added tokens (as DeepSeek ships <think>): render_deepseek_v4.c
emits them by id when the tokenizer has them, and decoding keeps them.
"""

import heapq
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
import bpe_tokenizer as bt  # noqa: E402

D = "｜DSML｜"
# (content, special). Order fixes the ids after the BPE vocab.
ADDED = [
    ("<｜begin▁of▁sentence｜>", True),
    ("<｜end▁of▁sentence｜>", True),
    ("<｜User｜>", True),
    ("<｜Assistant｜>", True),
    ("<｜image｜>", True),
    ("<think>", False),
    ("</think>", False),
    ("<" + D + "tool_calls>", False),
    ("</" + D + "tool_calls>", False),
    ("</" + D + "invoke>", False),
    ("</" + D + "parameter>", False),
    ("<" + D + "tool_results>", False),
    ("</" + D + "tool_results>", False),
    ("</" + D + "result>", False),
]
BOS, EOS = ADDED[0][0], ADDED[1][0]

# A Jinja rendering of render_deepseek_v4.c's format (thinking off unless
# `thinking` is set), for HF tooling (tool-call arguments as a mapping, as
# transformers passes them); deepinfer renders in C.
CHAT_TEMPLATE = (
    "{%- set ns = namespace(system='', last_user=-1) -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'system' -%}"
    "{%- set ns.system = ns.system + ('\n\n' if ns.system else '') + m['content'] -%}{%- endif -%}"
    "{%- if m['role'] == 'user' -%}{%- set ns.last_user = loop.index0 -%}{%- endif -%}{%- endfor -%}"
    "{{- bos_token + ns.system -}}"
    "{%- if tools -%}{{- '\n\n' if ns.system else '' -}}"
    "{{- '## Tools\n\nYou can call the tools below. To call tools, write one block like this in your reply:\n\n"
    "<" + D + "tool_calls>\n<" + D + "invoke name=\"TOOL_NAME\">\n<" + D + "parameter name=\"PARAMETER_NAME\" "
    "string=\"true|false\">VALUE</" + D + "parameter>\n</" + D + "invoke>\n</" + D + "tool_calls>\n\n"
    "Write one invoke per call and one parameter per argument. Set string=\"true\" when VALUE is a plain string, "
    "written as is; set string=\"false\" when VALUE is JSON (a number, boolean, null, array or object). "
    "Tool results come back in a <" + D + "tool_results> block.\n\n<functions>' -}}"
    "{%- for t in tools -%}{%- set f = t['function'] if t['function'] is defined else t -%}"
    "{{- '\n' + {'name': f['name'], 'description': f['description'], 'parameters': f['parameters']} | tojson -}}"
    "{%- endfor -%}{{- '\n</functions>' -}}{%- endif -%}"
    "{%- set open = '<think>' if thinking is defined and thinking else '</think>' -%}"
    "{%- for m in messages -%}"
    "{%- if m['role'] == 'user' -%}{{- '<｜User｜>' + m['content'] -}}"
    "{%- if not loop.last and messages[loop.index0 + 1]['role'] == 'assistant' -%}"
    "{{- '<｜Assistant｜>' + open -}}{%- endif -%}"
    "{%- elif m['role'] == 'tool' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] != 'tool' -%}"
    "{{- '<｜User｜><" + D + "tool_results>' -}}{%- endif -%}"
    "{{- '\n<" + D + "result tool_call_id=\"' + (m['tool_call_id'] or '') + '\">' + m['content'] "
    "+ '</" + D + "result>' -}}"
    "{%- if loop.last or messages[loop.index0 + 1]['role'] != 'tool' -%}"
    "{{- '\n</" + D + "tool_results>' -}}"
    "{%- if not loop.last and messages[loop.index0 + 1]['role'] == 'assistant' -%}"
    "{{- '<｜Assistant｜>' + open -}}{%- endif -%}{%- endif -%}"
    "{%- elif m['role'] == 'assistant' -%}"
    "{%- if loop.first or messages[loop.index0 - 1]['role'] == 'assistant' -%}"
    "{{- '<｜Assistant｜>' + open -}}{%- endif -%}"
    "{%- if open == '<think>' -%}{{- (m['reasoning_content'] or '') + '</think>' -}}{%- endif -%}"
    "{{- m['content'] or '' -}}"
    "{%- if m['tool_calls'] -%}{{- '\n\n' if m['content'] else '' -}}{{- '<" + D + "tool_calls>\n' -}}"
    "{%- for tc in m['tool_calls'] -%}{%- set fn = tc['function'] -%}"
    "{{- '<" + D + "invoke name=\"' + fn['name'] + '\">\n' -}}"
    "{%- set args = fn['arguments'] -%}"
    "{%- for k, v in args.items() -%}"
    "{{- '<" + D + "parameter name=\"' + k + '\" string=\"' + ('true' if v is string else 'false') + '\">' -}}"
    "{{- v if v is string else v | tojson -}}{{- '</" + D + "parameter>\n' -}}{%- endfor -%}"
    "{{- '</" + D + "invoke>\n' -}}{%- endfor -%}{{- '</" + D + "tool_calls>' -}}{%- endif -%}"
    "{{- '<｜end▁of▁sentence｜>' -}}"
    "{%- endif -%}{%- endfor -%}"
    "{%- if add_generation_prompt and messages[-1]['role'] != 'assistant' and messages[-1]['role'] != 'tool' -%}"
    "{{- '<｜Assistant｜>' + open -}}{%- endif -%}"
)


def train(texts, vocab_size):
    """BPE over the pre-tokenized pieces of texts (added tokens removed).
    vocab_size counts the BPE vocab only. Returns (vocab, merges)."""
    counts = {}
    for text in texts:
        for seg, is_added in split_added(text):
            if is_added:
                continue
            for piece in bt.pretokenize(seg):
                counts[piece] = counts.get(piece, 0) + 1
    words = []
    freqs = []
    for piece, c in sorted(counts.items()):
        words.append([bt.BYTE_TO_UNI[b] for b in piece.encode("utf-8")])
        freqs.append(c)
    vocab = {bt.BYTE_TO_UNI[b]: b for b in range(256)}
    pair_cnt = {}
    where = {}
    for wi, syms in enumerate(words):
        c = freqs[wi]
        for i in range(len(syms) - 1):
            p = (syms[i], syms[i + 1])
            pair_cnt[p] = pair_cnt.get(p, 0) + c
            where.setdefault(p, set()).add(wi)
    # Max-heap on count, ties to the lexicographically smallest pair.
    heap = [(-c, p) for p, c in pair_cnt.items()]
    heapq.heapify(heap)
    merges = []
    while len(vocab) < vocab_size and heap:
        negc, best = heapq.heappop(heap)
        cur = pair_cnt.get(best, 0)
        if cur <= 0:
            continue
        if -negc != cur:
            heapq.heappush(heap, (-cur, best))
            continue
        a, b = best
        merged = a + b
        if merged not in vocab:
            vocab[merged] = len(vocab)
        merges.append(best)
        changed = {}
        for wi in sorted(where.pop(best, ())):
            syms, c = words[wi], freqs[wi]
            i, out = 0, []
            hit = False
            while i < len(syms):
                if i < len(syms) - 1 and syms[i] == a and syms[i + 1] == b:
                    out.append(merged)
                    i += 2
                    hit = True
                else:
                    out.append(syms[i])
                    i += 1
            if not hit:
                continue
            for i in range(len(syms) - 1):
                p = (syms[i], syms[i + 1])
                changed[p] = changed.get(p, 0) - c
            for i in range(len(out) - 1):
                p = (out[i], out[i + 1])
                changed[p] = changed.get(p, 0) + c
                where.setdefault(p, set()).add(wi)
            words[wi] = out
        pair_cnt.pop(best, None)
        for p, dc in changed.items():
            if p == best or dc == 0:
                continue
            n = pair_cnt.get(p, 0) + dc
            pair_cnt[p] = n
            if dc > 0:
                heapq.heappush(heap, (-n, p))
    return vocab, merges


_ADDED_SORTED = sorted((a for a, _ in ADDED), key=len, reverse=True)


def split_added(text):
    """[(segment, is_added)]: added tokens matched leftmost-longest."""
    out = []
    i, n = 0, len(text)
    start = 0
    while i < n:
        if text[i] == "<":
            for a in _ADDED_SORTED:
                if text.startswith(a, i):
                    if i > start:
                        out.append((text[start:i], False))
                    out.append((a, True))
                    i += len(a)
                    start = i
                    break
            else:
                i += 1
        else:
            j = text.find("<", i)
            i = n if j < 0 else j
    if start < n:
        out.append((text[start:], False))
    return out


class Tokenizer:
    def __init__(self, vocab, merges):
        self.vocab, self.merges = vocab, merges
        self.ranks = {m: i for i, m in enumerate(merges)}
        self.n_bpe = len(vocab)
        self.added = {a: self.n_bpe + i for i, (a, _) in enumerate(ADDED)}
        self.inv = {v: k for k, v in vocab.items()}
        for a, i in self.added.items():
            self.inv[i] = a
        self.cache = {}
        self.vocab_size = self.n_bpe + len(ADDED)

    @classmethod
    def load(cls, d):
        tj = json.load(open(os.path.join(d, "tokenizer.json"), encoding="utf-8"))
        m = tj["model"]
        merges = [tuple(x.split(" ")) if isinstance(x, str) else tuple(x) for x in m["merges"]]
        return cls(m["vocab"], merges)

    def _piece(self, piece):
        ids = self.cache.get(piece)
        if ids is not None:
            return ids
        syms = [bt.BYTE_TO_UNI[b] for b in piece.encode("utf-8")]
        ranks = self.ranks
        while len(syms) > 1:
            best, bi = 1 << 30, -1
            for i in range(len(syms) - 1):
                r = ranks.get((syms[i], syms[i + 1]), 1 << 30)
                if r < best:
                    best, bi = r, i
            if bi < 0:
                break
            syms[bi:bi + 2] = [syms[bi] + syms[bi + 1]]
        ids = [self.vocab[s] for s in syms]
        if len(self.cache) < 500_000:
            self.cache[piece] = ids
        return ids

    def encode_text(self, text):
        """Untrusted text: no added tokens."""
        out = []
        for piece in bt.pretokenize(text):
            out.extend(self._piece(piece))
        return out

    def encode(self, text):
        """Trusted text (our rendered prompts): added tokens by id."""
        out = []
        for seg, is_added in split_added(text):
            if is_added:
                out.append(self.added[seg])
            else:
                out.extend(self.encode_text(seg))
        return out

    def decode(self, ids):
        out = bytearray()
        for i in ids:
            t = self.inv.get(int(i))
            if t is None:
                continue
            if int(i) >= self.n_bpe:
                out += t.encode("utf-8")
            else:
                out += bytes(bt.UNI_TO_BYTE[ch] for ch in t)
        return out.decode("utf-8", errors="replace")

    def write(self, d, model_max_length=4096):
        tj = bt.tokenizer_json(self.vocab, self.merges)
        tj["added_tokens"] = [
            {"id": self.n_bpe + i, "content": a, "single_word": False, "lstrip": False, "rstrip": False,
             "normalized": False, "special": sp}
            for i, (a, sp) in enumerate(ADDED)
        ]
        with open(os.path.join(d, "tokenizer.json"), "w", encoding="utf-8") as f:
            json.dump(tj, f, ensure_ascii=False, indent=1)
        cfg = bt.tokenizer_config(self.n_bpe)
        cfg["added_tokens_decoder"] = {
            str(self.n_bpe + i): {"content": a, "lstrip": False, "normalized": False, "rstrip": False,
                                  "single_word": False, "special": sp}
            for i, (a, sp) in enumerate(ADDED)
        }
        cfg["model_max_length"] = model_max_length
        cfg["chat_template"] = CHAT_TEMPLATE
        with open(os.path.join(d, "tokenizer_config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg, f, ensure_ascii=False, indent=1)
