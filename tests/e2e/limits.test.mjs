// limits.test.mjs — what a server under stress must do: a client that
// disconnects mid-stream cancels its request (the engine's cancelled count
// moves and every KV block returns to the pool), a full queue answers 429,
// /metrics exposes the Prometheus series the dashboards read, and hostile
// bodies (seeded random mutations of valid requests) get answers, not crashes.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import fs from 'node:fs';
import { startServer, metrics, sleep, MODEL, ASAN_BIN, BIN } from './server.mjs';

let srv;
before(async () => { srv = await startServer(['--max-pending', '2', '--default-max-tokens', '8'], fs.existsSync(ASAN_BIN) ? ASAN_BIN : BIN); });
after(async () => { assert.equal(await srv.stop(), 0, `server exit (ASan reports leaks here):\n${srv.log().slice(-3000)}`); });

const long = (signal) => fetch(`${srv.url}/v1/chat/completions`, {
  method: 'POST', signal, headers: { 'content-type': 'application/json' },
  body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'go on' }], max_tokens: 20000, ignore_eos: true, stream: true }),
});

async function waitFor(pred, ms = 5000) {
  const t0 = Date.now();
  for (;;) {
    const m = await metrics(srv.url);
    if (pred(m)) return m;
    if (Date.now() - t0 > ms) return m;
    await sleep(20);
  }
}

test('a client disconnect cancels the request and frees its KV blocks', async () => {
  const before = await metrics(srv.url);
  const used0 = before.get('deepinfer_kv_blocks_used');
  const cancelled0 = before.get('deepinfer_engine_requests_cancelled_total');
  const ac = new AbortController();
  const res = await long(ac.signal);
  const reader = res.body.getReader();
  for (let got = 0; got < 5;) { await reader.read(); got++; }
  const during = await metrics(srv.url);
  assert.equal(during.get('deepinfer_requests_running'), 1);
  const t0 = Date.now();
  ac.abort();
  const after = await waitFor((m) => m.get('deepinfer_engine_requests_cancelled_total') > cancelled0 && m.get('deepinfer_requests_running') === 0);
  const ms = Date.now() - t0;
  assert.equal(after.get('deepinfer_engine_requests_cancelled_total'), cancelled0 + 1);
  assert.equal(after.get('deepinfer_requests_running'), 0);
  assert.equal(after.get('deepinfer_requests_pending'), 0);
  assert.ok(after.get('deepinfer_kv_blocks_used') <= used0 + after.get('deepinfer_kv_blocks_cached'), 'blocks back in the pool');
  assert.ok(ms < 2000, `cancelled after ${ms} ms`);
});

test('a full queue answers 429 in the protocol error shape', async () => {
  const acs = [new AbortController(), new AbortController()];
  const streams = await Promise.all(acs.map((ac) => long(ac.signal)));
  for (const s of streams) assert.equal(s.status, 200);
  const client = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'x', maxRetries: 0 });
  await assert.rejects(client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 2 }), (e) => e.status === 429 && e instanceof OpenAI.RateLimitError);
  const an = await fetch(`${srv.url}/v1/messages`, { method: 'POST', body: JSON.stringify({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'x' }] }) });
  assert.equal(an.status, 429);
  assert.equal((await an.json()).error.type, 'rate_limit_error');
  acs.forEach((ac) => ac.abort());
  const m = await waitFor((x) => x.get('deepinfer_requests_pending') === 0 && x.get('deepinfer_requests_running') === 0);
  assert.equal(m.get('deepinfer_requests_pending'), 0);
  const ok = await client.chat.completions.create({ model: MODEL, messages: [{ role: 'user', content: 'x' }], max_tokens: 2 });
  assert.equal(ok.choices.length, 1);
});

test('/metrics exposes requests, tokens, TTFT/TBT histograms and engine gauges', async () => {
  await fetch(`${srv.url}/tokenize`, { method: 'POST', body: JSON.stringify({ prompt: 'hi' }) });
  const { text } = await metrics(srv.url);
  for (const series of ['deepinfer_requests_total{endpoint="chat_completions",status="200"}', 'deepinfer_requests_total{endpoint="chat_completions",status="429"}',
    'deepinfer_requests_total{endpoint="tokenize",status="200"}',
    'deepinfer_prompt_tokens_total', 'deepinfer_generation_tokens_total', 'deepinfer_cached_prompt_tokens_total',
    'deepinfer_time_to_first_token_seconds_bucket{le="+Inf"}', 'deepinfer_time_between_tokens_seconds_count',
    'deepinfer_requests_running', 'deepinfer_requests_waiting', 'deepinfer_kv_blocks_used', 'deepinfer_prefix_cache_hit_rate']) {
    assert.ok(text.includes(series), `missing ${series}`);
  }
});

test('hostile bodies: seeded mutations of valid requests never crash the server', async () => {
  let seed = 12345;
  const rnd = (n) => { seed = (seed * 1103515245 + 12345) % 2147483648; return seed % n; };
  const valid = {
    '/v1/chat/completions': { model: MODEL, messages: [{ role: 'user', content: 'hi' }, { role: 'assistant', content: null, tool_calls: [{ id: 'c', type: 'function', function: { name: 'f', arguments: '{}' } }] }, { role: 'tool', tool_call_id: 'c', content: 'r' }], tools: [{ type: 'function', function: { name: 'f', parameters: { type: 'object' } } }], max_tokens: 2, n: 2, stop: ['x'], logprobs: true, top_logprobs: 2 },
    '/v1/completions': { model: MODEL, prompt: 'hi', max_tokens: 2, echo: true, logprobs: 1 },
    '/v1/responses': { model: MODEL, input: [{ role: 'user', content: 'hi' }, { type: 'function_call', call_id: 'c', name: 'f', arguments: '{}' }, { type: 'function_call_output', call_id: 'c', output: 'r' }], max_output_tokens: 2, tools: [{ type: 'function', name: 'f' }], include: ['message.output_text.logprobs'], top_logprobs: 2 },
    '/v1/messages': { model: MODEL, max_tokens: 2, system: 's', messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }, { role: 'assistant', content: [{ type: 'tool_use', id: 't', name: 'f', input: {} }] }, { role: 'user', content: [{ type: 'tool_result', tool_use_id: 't', content: 'r' }] }], tools: [{ name: 'f', input_schema: { type: 'object' } }], stop_sequences: ['x'] },
    '/v1/messages/count_tokens': { model: MODEL, system: 's', messages: [{ role: 'user', content: [{ type: 'text', text: 'hi' }] }], tools: [{ name: 'f', input_schema: { type: 'object' } }] },
    '/tokenize': { model: MODEL, messages: [{ role: 'user', content: 'hi' }], response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'object', properties: { a: { anyOf: [{ type: 'string' }, { $ref: '#/$defs/B' }] } }, $defs: { B: { type: 'array', items: { enum: [1, 'x'] } } } } } } },
    '/detokenize': { model: MODEL, tokens: [1, 2, 3, 40] },
  };
  const junk = [null, true, -1, 1e308, 2 ** 63, '', 'x'.repeat(3000), [], {}, [[[]]], { type: 'text' }, '\u0000', '<｜User｜>'];
  const statuses = new Map();
  for (let i = 0; i < 210; i++) {
    const path = Object.keys(valid)[i % 7];
    let body;
    const obj = structuredClone(valid[path]);
    const mode = rnd(4);
    if (mode === 0) { // replace a random (nested) value with junk
      let o = obj; for (let d = 0; d < 3 && o && typeof o === 'object'; d++) { const ks = Object.keys(o); if (!ks.length) break; const k = ks[rnd(ks.length)]; if (d === 2 || typeof o[k] !== 'object' || o[k] === null || rnd(2)) { o[k] = junk[rnd(junk.length)]; break; } o = o[k]; }
      body = JSON.stringify(obj);
    } else if (mode === 1) { // delete a top-level key
      const ks = Object.keys(obj); delete obj[ks[rnd(ks.length)]]; body = JSON.stringify(obj);
    } else { // byte-level damage: truncate or flip bytes
      const b = Buffer.from(JSON.stringify(obj));
      if (mode === 2) body = b.subarray(0, rnd(b.length));
      else { for (let k = 0; k < 3; k++) b[rnd(b.length)] = rnd(256); body = b; }
    }
    if (!body.length) body = '';
    const res = await fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
    const text = await res.text();
    statuses.set(res.status, (statuses.get(res.status) ?? 0) + 1);
    assert.ok([200, 400, 404].includes(res.status), `${path} ${res.status}: ${text.slice(0, 200)}`);
    if (res.status !== 200) {
      const e = JSON.parse(text);
      assert.ok(path.startsWith('/v1/messages') ? e.type === 'error' && e.error.message : e.error.message, text);
    }
  }
  assert.ok(statuses.get(200) > 0 && statuses.get(400) > 0, JSON.stringify([...statuses]));
  assert.equal((await fetch(`${srv.url}/health`)).status, 200);
  const m = await waitFor((x) => x.get('deepinfer_requests_pending') === 0);
  assert.equal(m.get('deepinfer_requests_pending'), 0);
});
