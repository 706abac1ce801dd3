#!/usr/bin/env node
// loadgen.mjs — load generator for `deepinfer serve`: N concurrent streaming
// clients send R requests in total and the run reports requests/s, output
// tokens/s, TTFT and TBT percentiles, and checks what a server under load
// must guarantee:
//   - every request completes (HTTP 200, a finish reason, [DONE]);
//   - no token is lost or duplicated: greedy streams (temperature 0) must
//     equal their reference output, fetched once per prompt beforehand
//     without load (non-streamed), and completion_tokens must match;
//   - server memory returns to its baseline (RSS read from /proc/PID/status
//     before and after, when the server runs on this machine).
// No npm dependencies (Node's fetch).
//
//   node tools/loadgen.mjs --model build/models/dsv3-tiny [--concurrency 64] [--requests 10000]
//   node tools/loadgen.mjs --url http://127.0.0.1:8000 --pid PID ...
// Options: --max-tokens 16, --rounds 1 (repeat the load; RSS after each), --prompts 32 (distinct prompts), --bin build/deepinfer,
// --server-args="..." (extra serve flags), --json (one JSON line at the end).
// Exit status 1 when any request failed or any stream differed from its reference.
import { spawn } from 'node:child_process';
import fs from 'node:fs';

const args = Object.fromEntries(process.argv.slice(2).reduce((acc, a, i, all) => {
  const eq = a.indexOf('=');
  if (a.startsWith('--') && eq > 0) acc.push([a.slice(2, eq), a.slice(eq + 1)]);
  else if (a.startsWith('--')) acc.push([a.slice(2), all[i + 1] && !all[i + 1].startsWith('--') ? all[i + 1] : true]);
  return acc;
}, []));
const C = Number(args.concurrency ?? 64), R = Number(args.requests ?? 10000);
const MAXT = Number(args['max-tokens'] ?? 16), P = Number(args.prompts ?? 32);

function rss(pid) {
  try { return Number(fs.readFileSync(`/proc/${pid}/status`, 'utf8').match(/VmRSS:\s+(\d+)/)[1]) * 1024; } catch { return NaN; }
}
const pct = (xs, p) => { if (!xs.length) return NaN; const s = [...xs].sort((a, b) => a - b); return s[Math.min(s.length - 1, Math.floor(p / 100 * s.length))]; };
const ms = (x) => (x * 1000).toFixed(1);

async function startServer() {
  const bin = args.bin ?? 'build/deepinfer';
  const extra = args['server-args'] ? String(args['server-args']).split(/\s+/) : [];
  const proc = spawn(bin, ['serve', '--model', args.model, '--port', '0', '--max-pending', String(Math.max(256, C * 2)), ...extra], { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((res, rej) => {
    proc.stderr.on('data', (d) => { log += d; const m = log.match(/listening on http:\/\/[\d.]+:(\d+)/); if (m) res(m[1]); });
    proc.on('exit', (c) => rej(new Error(`server exited ${c}: ${log}`)));
  });
  return { url: `http://127.0.0.1:${port}`, pid: proc.pid, proc };
}

async function once(url, prompt, stream) {
  const body = { prompt, max_tokens: MAXT, temperature: 0, stream };
  if (stream) body.stream_options = { include_usage: true };
  const t0 = performance.now() / 1000;
  const res = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
  if (res.status !== 200) return { ok: false, error: `HTTP ${res.status}: ${(await res.text()).slice(0, 200)}` };
  if (!stream) { const j = await res.json(); return { ok: true, text: j.choices[0].text, tokens: j.usage.completion_tokens }; }
  const dec = new TextDecoder();
  let buf = '', text = '', tokens = -1, finish = null, done = false, first = 0, last = 0;
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const ev = buf.slice(0, i); buf = buf.slice(i + 2);
      if (!ev.startsWith('data: ')) continue;
      const data = ev.slice(6);
      if (data === '[DONE]') { done = true; continue; }
      const j = JSON.parse(data);
      if (j.usage) tokens = j.usage.completion_tokens;
      for (const c of j.choices) {
        if (c.text) {
          const now = performance.now() / 1000;
          if (!first) first = now;
          last = now;
          text += c.text;
        }
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
  }
  const ok = done && finish !== null;
  // TBT per request: mean time between tokens after the first (chunks that
  // arrive in one TCP read would otherwise read as 0)
  const tbt = tokens > 1 && last > first ? (last - first) / (tokens - 1) : NaN;
  return { ok, error: ok ? null : 'stream ended without finish/[DONE]', text, tokens, ttft: first ? first - t0 : NaN, tbt };
}

const srv = args.url ? { url: args.url, pid: args.pid } : await startServer();
const prompts = Array.from({ length: P }, (_, i) => `Request ${i}: the quick brown fox jumps over the lazy dog number ${i * 7919 % 1000}`);
const ref = [];
for (const p of prompts) ref.push(await once(srv.url, p, false));
// warm-up: one request per client, so thread stacks and allocator arenas
// exist before the baseline is taken
await Promise.all(Array.from({ length: C }, (_, i) => once(srv.url, prompts[i % P], true)));
const rss0 = srv.pid ? rss(srv.pid) : NaN;

let anyBad = false;
const rounds = Number(args.rounds ?? 1);
for (let round = 1; round <= rounds; round++) {
  let next = 0, failed = 0, mismatched = 0, outTokens = 0;
  const ttfts = [], tbts = [], errors = [];
  const t0 = performance.now() / 1000;
  async function worker() {
    while (next < R) {
      const k = next++;
      const r = await once(srv.url, prompts[k % P], true).catch((e) => ({ ok: false, error: String(e) }));
      if (!r.ok) { failed++; if (errors.length < 5) errors.push(r.error); continue; }
      outTokens += r.tokens;
      if (!Number.isNaN(r.ttft)) ttfts.push(r.ttft);
      if (!Number.isNaN(r.tbt)) tbts.push(r.tbt);
      if (r.text !== ref[k % P].text || r.tokens !== ref[k % P].tokens) { mismatched++; if (errors.length < 5) errors.push(`request ${k}: stream differs from its reference`); }
    }
  }
  await Promise.all(Array.from({ length: C }, worker));
  const wall = performance.now() / 1000 - t0;
  let rss1 = NaN;
  anyBad ||= failed > 0 || mismatched > 0;
  if (srv.pid) { await new Promise((r) => setTimeout(r, 500)); rss1 = rss(srv.pid); }
  const out = {
    concurrency: C, requests: R, failed, mismatched, wall_s: +wall.toFixed(2),
    requests_per_s: +(R / wall).toFixed(1), output_tokens_per_s: +(outTokens / wall).toFixed(1),
    ttft_ms: { p50: +ms(pct(ttfts, 50)), p90: +ms(pct(ttfts, 90)), p99: +ms(pct(ttfts, 99)) },
    tbt_ms: { p50: +ms(pct(tbts, 50)), p90: +ms(pct(tbts, 90)), p99: +ms(pct(tbts, 99)) },
    rss_mib: { before: +(rss0 / 1048576).toFixed(1), after: +(rss1 / 1048576).toFixed(1) },
  };
  if (args.json) console.log(JSON.stringify(out));
  else {
    console.log(`loadgen round ${round}/${rounds}: ${R} requests, ${C} concurrent streams, ${MAXT} tokens each, ${P} prompts`);
    console.log(`  completed ${R - failed}, failed ${failed}, streams differing from greedy reference ${mismatched}`);
    console.log(`  ${out.requests_per_s} requests/s, ${out.output_tokens_per_s} output tokens/s over ${out.wall_s} s`);
    console.log(`  TTFT ms p50 ${out.ttft_ms.p50} p90 ${out.ttft_ms.p90} p99 ${out.ttft_ms.p99}; TBT ms p50 ${out.tbt_ms.p50} p90 ${out.tbt_ms.p90} p99 ${out.tbt_ms.p99}`);
    console.log(`  server RSS MiB before ${out.rss_mib.before} after ${out.rss_mib.after}`);
    for (const e of errors) console.log(`  error: ${e}`);
  }
}
if (srv.proc) srv.proc.kill('SIGTERM');
process.exitCode = anyBad ? 1 : 0;
