// corpus.mjs — the tokenizer conformance corpus, generated deterministically
// (seeded PRNG, no files): English prose, code in several languages, CJK,
// Arabic and other scripts (with decomposed forms, so NFC matters), emoji and
// ZWJ sequences, digits of every length, whitespace runs and mixed newlines,
// strings that look like control tokens, and pathological inputs (very long
// words, a 1 MB record without spaces). makeCorpus() returns records (strings
// without NUL); each is compared on its own so a mismatch is reported exactly.

export function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const WORDS = `the of and to in is was he for it with as his on be at by had are but from or
have an they which one you were her all she there would their we him been has when who will
more no if out so said what up its about into than them can only other new some could time
these two may then do first any my now such like our over man me even most made after also
did many before must through back years where much your way well down should because each
just those people how too little state good very make world still own see men work long get
here between both life being under never day same another know while last might us great old
year off come since against go came right used take three don't can't it's I'm you're we've
they'll she'd WON'T O'Neil rock'n'roll naïve café résumé coöperate Zoë über façade
internationalization antidisestablishmentarianism HTTPServer getElementById XMLHttpRequest`.split(/\s+/);

const CODE = [
  `#include <stdio.h>\n\nint main(int argc, char **argv) {\n    for (int i = 0; i < argc; i++) {\n        printf("%d: %s\\n", i, argv[i]);\n    }\n    return 0;\n}\n`,
  `def fib(n: int) -> int:\n    """Return the n-th Fibonacci number."""\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a\n\nif __name__ == "__main__":\n    print([fib(i) for i in range(20)])\n`,
  `const express = require('express');\nconst app = express();\napp.get('/api/v1/users/:id', async (req, res) => {\n  const user = await db.users.findOne({ id: req.params.id });\n  res.json(user ?? { error: 'not found' });\n});\n`,
  `fn main() {\n    let v: Vec<u64> = (1..=10).map(|x| x * x).collect();\n    println!("{:?}", v);\n    let s = String::from("héllo");\n    match s.as_str() { "a" => {}, _ => unreachable!() }\n}\n`,
  `package main\n\nimport "fmt"\n\nfunc main() {\n\tch := make(chan int, 3)\n\tgo func() { ch <- 42 }()\n\tfmt.Println(<-ch)\n}\n`,
  `<!DOCTYPE html>\n<html lang="en">\n<head><meta charset="utf-8"><title>Test &amp; page</title></head>\n<body>\n  <div class="a b" id='x'>Hello&nbsp;world</div>\n</body>\n</html>\n`,
  `{"name": "deepinfer", "version": "1.0.0", "tags": ["llm", "c"], "nested": {"a": [1, 2.5, -3e10, null, true]}}\n`,
  `#!/usr/bin/env bash\nset -euo pipefail\nfor f in *.txt; do\n  wc -l "$f" | awk '{print $1}' >> /tmp/out.log 2>&1\ndone\n`,
  `SELECT u.id, COUNT(*) AS n FROM users u LEFT JOIN orders o ON o.user_id = u.id WHERE u.created_at >= '2024-01-01' GROUP BY u.id HAVING n > 10;\n`,
  `\\begin{equation}\n  E = mc^2 \\quad \\int_0^\\infty e^{-x^2}\\,dx = \\frac{\\sqrt{\\pi}}{2}\n\\end{equation}\n`,
];

const SCRIPTS = [
  '中文分词测试：今天天气很好，我们去公园散步吧！人工智能正在改变世界。',
  '日本語のテキストです。ひらがな、カタカナ、漢字が混ざっています。東京タワーへ行きましょう。',
  '한국어 텍스트입니다. 안녕하세요, 만나서 반갑습니다!',
  'مرحبا بالعالم، هذا نص عربي للاختبار. الذكاء الاصطناعي ١٢٣٤٥٦٧٨٩٠',
  'שלום עולם, זהו טקסט בעברית.',
  'Привет, мир! Это тестовый текст на русском языке. ЁЖИК и ёжик.',
  'Γειά σου Κόσμε! Ελληνικά κείμενα με τόνους: άέήίόύώ ΐΰ.',
  'नमस्ते दुनिया, यह हिंदी पाठ है। क्षत्रिय ज्ञान',
  'สวัสดีชาวโลก ภาษาไทยไม่มีช่องว่างระหว่างคำ',
  'Tiếng Việt có dấu: Đường phố Hà Nội rất đẹp.',
  'e\u0301 a\u0308 o\u0303 n\u0303 A\u030a \u1100\u1161\u11a8 Å Ω K ﬁ ﬀ ① ² ½ ｆｕｌｌ ｗｉｄｔｈ',
  'Ⅻ ⅷ ↉ ¼ ⁵ ₉ ᛮ 𝟘𝟙𝟚 ０１２３ ٣٤ ۴۵ ߁߂',
];

const EMOJI = ['😀', '🎉', '👍🏽', '👨‍👩‍👧‍👦', '🏳️‍🌈', '🇯🇵', '🇺🇸', '1️⃣', '❤️', '🧑🏿‍💻', '👩‍❤️‍💋‍👨', '🫠', '☕', '✨'];

const WS = [' ', '  ', '   ', '\t', '\n', '\n\n', '\r\n', '\r', ' \n', '\n ', '\t\t', '    ', '\u00a0', '\u3000', ' \t \n'];

export const LOOKALIKES = [
  '<|im_start|>', '<|im_end|>', '<|endoftext|>', '<|begin_of_text|>', '<|eot_id|>',
  '<|start_header_id|>', '<｜User｜>', '<｜Assistant｜>', '<｜begin▁of▁sentence｜>',
  '<｜end▁of▁sentence｜>', '<think>', '</think>', '<tool_call>', '<s>', '</s>', '<unk>',
  '<|im_start', 'im_end|>', '<｜User', '<|reserved_special_token_0|>', '<｜tool▁calls▁begin｜>',
  '<|fim_prefix|>', '[INST]', '[/INST]', '<<SYS>>', '<0x41>', '▁', '▁▁hello', 'Ġthe',
];

function pick(r, a) { return a[Math.floor(r() * a.length)]; }

function prose(r, nwords) {
  let out = [];
  let cap = true;
  for (let i = 0; i < nwords; i++) {
    let w = pick(r, WORDS);
    if (cap) w = w[0].toUpperCase() + w.slice(1);
    cap = false;
    out.push(w);
    const p = r();
    if (p < 0.08) { out[out.length - 1] += '.'; cap = true; }
    else if (p < 0.12) out[out.length - 1] += ',';
    else if (p < 0.13) out[out.length - 1] += '!';
    else if (p < 0.14) out[out.length - 1] = `"${out[out.length - 1]}"`;
    else if (p < 0.15) out[out.length - 1] = `(${out[out.length - 1]})`;
  }
  return out.join(' ') + '.';
}

function digits(r, len) {
  let s = '';
  for (let i = 0; i < len; i++) s += String.fromCharCode(48 + Math.floor(r() * 10));
  return s;
}

function randomChars(r, n, alphabet) {
  let s = '';
  for (let i = 0; i < n; i++) s += pick(r, alphabet);
  return s;
}

export function makeCorpus({ big = true } = {}) {
  const r = rng(20260101);
  const recs = [];
  // prose paragraphs
  for (let i = 0; i < 600; i++) recs.push(prose(r, 20 + Math.floor(r() * 200)));
  // code, with mixed newline conventions and indentation
  for (let i = 0; i < 300; i++) {
    let c = pick(r, CODE);
    const m = r();
    if (m < 0.2) c = c.replace(/\n/g, '\r\n');
    else if (m < 0.3) c = c.replace(/\n/g, '\r');
    else if (m < 0.4) c = c.replace(/    /g, '\t');
    recs.push(c + (r() < 0.5 ? pick(r, CODE) : ''));
  }
  // scripts, mixed with ASCII, emoji, digits
  for (let i = 0; i < 600; i++) {
    let s = '';
    const n = 1 + Math.floor(r() * 6);
    for (let k = 0; k < n; k++) {
      const q = r();
      if (q < 0.4) s += pick(r, SCRIPTS);
      else if (q < 0.55) s += pick(r, EMOJI);
      else if (q < 0.7) s += prose(r, 5);
      else if (q < 0.85) s += digits(r, 1 + Math.floor(r() * 12));
      else s += pick(r, WS);
      if (r() < 0.6) s += pick(r, WS);
    }
    recs.push(s);
  }
  // digits of every length, alone and in context
  for (let len = 1; len <= 64; len++) {
    recs.push(digits(r, len));
    recs.push(`x${digits(r, len)}y ${digits(r, len)}.${digits(r, 3)} -${digits(r, len)}`);
    recs.push(`Total: $${digits(r, len)},${digits(r, 3)} (${digits(r, len % 7 + 1)}%)`);
  }
  // whitespace runs and newline mixtures
  for (let i = 0; i < 300; i++) {
    let s = '';
    const n = 1 + Math.floor(r() * 10);
    for (let k = 0; k < n; k++) {
      s += pick(r, WS).repeat(1 + Math.floor(r() * 5));
      if (r() < 0.7) s += pick(r, WORDS);
      if (r() < 0.2) s += pick(r, ['!', '?', '...', '---', '"', "'", '(', ')', '{', '}', ';']);
    }
    recs.push(s);
  }
  // control-token look-alikes in text
  for (let i = 0; i < 400; i++) {
    const a = pick(r, LOOKALIKES), b = pick(r, LOOKALIKES);
    const q = r();
    if (q < 0.25) recs.push(a);
    else if (q < 0.5) recs.push(`${prose(r, 4)}${a}${prose(r, 3)}`);
    else if (q < 0.75) recs.push(`${a}\n${b} ${a}${b}`);
    else recs.push(` ${a} user: hi${b}assistant:`);
  }
  // random soup of everything (short records)
  const soup = [...'abcXYZ019 \n\t.,;:!?\'"()[]{}<>|/\\-_=+*&^%$#@~`'].concat(
    [...'éüñßøΩдж中日한ع'], EMOJI, ['\r\n', '  ', '▁', 'Ġ', '\u200d', '\u0301']);
  for (let i = 0; i < 3000; i++) recs.push(randomChars(r, 1 + Math.floor(r() * 60), soup));
  // pathological
  recs.push('a'.repeat(20000));
  recs.push('supercalifragilistic'.repeat(2000));
  recs.push(' '.repeat(10000) + 'x');
  recs.push('\n'.repeat(5000) + 'y' + '\r\n'.repeat(3000));
  recs.push('9'.repeat(30000));
  recs.push('😀'.repeat(5000));
  recs.push('中'.repeat(20000));
  recs.push('!?'.repeat(10000));
  if (big) {
    // 1 MB without spaces: letters, digits and punctuation, no whitespace
    const alpha = [...'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,-_/'];
    recs.push(randomChars(r, 1 << 20, alpha));
  }
  return recs;
}

// All records, as the CLI reads them (NUL-separated), and total size in bytes.
export function corpusBytes(recs) {
  return Buffer.byteLength(recs.join('\0'), 'utf8');
}
