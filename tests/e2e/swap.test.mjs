// swap.test.mjs — preemption through the HTTP server. Four concurrent long
// completions in a KV pool of four blocks preempt one another; with
// --swap-space a preempted request's KV goes to host memory and comes back
// when it resumes (the swap counters in /metrics move), and every completion
// equals what a server with room for all of them answers. Both servers run
// batch-invariant, so the bits cannot depend on what ran alongside.
// With vLLM's priority scheduling, a more urgent request preempts a running
// one and finishes first; the preempted one resumes to the same text.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startServer, metrics, MODEL, ASAN_BIN, BIN } from './server.mjs';

const prompts = ['The quick brown fox', 'Once upon a time there was', 'In the beginning', 'To be, or not to be'];
const MAX = 200;

const complete = async (url, prompt) => {
  const r = await fetch(`${url}/v1/completions`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens: MAX, temperature: 0, ignore_eos: true }),
  });
  assert.equal(r.status, 200);
  return r.json();
};

let roomy, tight, urgent;
before(async () => {
  roomy = await startServer(['--batch-invariant']);
  urgent = await startServer(['--batch-invariant', '--max-running', '1', '--scheduling-policy', 'priority']);
  tight = await startServer(['--batch-invariant', '--kv-blocks', '4', '--swap-space', '16'],
    fs.existsSync(ASAN_BIN) ? ASAN_BIN : BIN);
});
after(async () => {
  assert.equal(await roomy.stop(), 0);
  assert.equal(await urgent.stop(), 0);
  assert.equal(await tight.stop(), 0, `server exit (ASan reports leaks here):\n${tight.log().slice(-3000)}`);
});

test('preempted requests resume from swap space with the same completions', async () => {
  const want = await Promise.all(prompts.map((p) => complete(roomy.url, p)));
  const got = await Promise.all(prompts.map((p) => complete(tight.url, p)));
  for (let i = 0; i < prompts.length; i++) {
    assert.equal(got[i].usage.completion_tokens, MAX);
    assert.equal(got[i].choices[0].text, want[i].choices[0].text, `completion ${i}`);
  }
  const m = await metrics(tight.url);
  const outs = m.get('deepinfer_swap_outs_total');
  assert.ok(outs > 0, 'a preemption swapped');
  assert.ok(m.get('deepinfer_preemptions_total') >= outs);
  assert.equal(m.get('deepinfer_swap_ins_total'), outs);
  assert.equal(m.get('deepinfer_swap_used_bytes'), 0);
  assert.equal(m.get('deepinfer_kv_blocks_used'), 0);
});

test("vLLM's priority: a more urgent request preempts a running one and ends first", async () => {
  const body = (prompt, max_tokens, priority, stream = false) => ({
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ model: MODEL, prompt, max_tokens, temperature: 0, ignore_eos: true, priority, stream }),
  });
  const order = [];
  const long = await fetch(`${urgent.url}/v1/completions`, body(prompts[0], 1500, 5, true));
  const reader = long.body.getReader();
  const utf8 = new TextDecoder();
  let text = utf8.decode((await reader.read()).value, { stream: true }); // the long one is running
  const longDone = (async () => {
    for (;;) {
      const { done, value } = await reader.read();
      if (done) break;
      text += utf8.decode(value, { stream: true });
    }
    order.push('long');
    return text;
  })();
  const short = await (await fetch(`${urgent.url}/v1/completions`, body(prompts[1], 8, -1))).json();
  order.push('short');
  assert.equal(short.usage.completion_tokens, 8);
  const sse = await longDone;
  assert.deepEqual(order, ['short', 'long'], 'the urgent request ended first');
  const longText = sse.split('\n').filter((l) => l.startsWith('data: {'))
    .map((l) => JSON.parse(l.slice(6)).choices[0]?.text ?? '').join('');
  const longAlone = await (await fetch(`${roomy.url}/v1/completions`, body(prompts[0], 1500, 0))).json();
  assert.equal(longText, longAlone.choices[0].text, 'the preempted one resumed to the same text');
  const m = await metrics(urgent.url);
  assert.ok(m.get('deepinfer_preemptions_total') >= 1, 'it preempted the running one');
  const alone = await (await fetch(`${roomy.url}/v1/completions`, body(prompts[1], 8, 0))).json();
  assert.equal(short.choices[0].text, alone.choices[0].text);
  // where priority scheduling is off, a priority other than 0 is refused
  const off = await fetch(`${roomy.url}/v1/completions`, body(prompts[1], 8, 1));
  assert.equal(off.status, 400);
  const err = await off.json();
  assert.equal(err.error.param, 'priority');
  assert.match(err.error.message, /--scheduling-policy priority/);
});
