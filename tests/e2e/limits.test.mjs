// limits.test.mjs — what a server under stress must do: a client that
// disconnects mid-stream cancels its request (the engine's cancelled count
// moves and every KV block returns to the pool), a full queue answers 429,
// and /metrics exposes the Prometheus series the dashboards read.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import { startServer, metrics, sleep, MODEL } from './server.mjs';

let srv;
before(async () => { srv = await startServer(['--max-pending', '2']); });
after(async () => { assert.equal(await srv.stop(), 0); });

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
  const { text } = await metrics(srv.url);
  for (const series of ['deepinfer_requests_total{endpoint="chat_completions",status="200"}', 'deepinfer_requests_total{endpoint="chat_completions",status="429"}',
    'deepinfer_prompt_tokens_total', 'deepinfer_generation_tokens_total', 'deepinfer_cached_prompt_tokens_total',
    'deepinfer_time_to_first_token_seconds_bucket{le="+Inf"}', 'deepinfer_time_between_tokens_seconds_count',
    'deepinfer_requests_running', 'deepinfer_requests_waiting', 'deepinfer_kv_blocks_used', 'deepinfer_prefix_cache_hit_rate']) {
    assert.ok(text.includes(series), `missing ${series}`);
  }
});
