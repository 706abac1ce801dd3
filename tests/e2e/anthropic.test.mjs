// anthropic.test.mjs — `deepinfer serve` driven by the official
// `@anthropic-ai/sdk`: messages (streamed with the SDK's stream helper and
// not), usage with cache reads, stop sequences, thinking, a tool_use /
// tool_result round trip, an assistant prefill, count_tokens, models.retrieve, and errors in
// Anthropic's error shape.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, MODEL } from './server.mjs';

const KEY = 'anthropic-key';
let srv, client;
before(async () => {
  srv = await startServer(['--api-key', KEY, '--max-model-len', '1024']);
  client = new Anthropic({ baseURL: srv.url, apiKey: KEY, maxRetries: 0 });
});
after(async () => { assert.equal(await srv.stop(), 0); });

const user = (content) => [{ role: 'user', content }];

test('messages: body shape, usage, greedy determinism', async () => {
  const req = { model: MODEL, max_tokens: 10, temperature: 0, messages: user('Hello') };
  const m = await client.messages.create(req);
  assert.equal(m.type, 'message');
  assert.equal(m.role, 'assistant');
  assert.ok(['end_turn', 'max_tokens'].includes(m.stop_reason));
  assert.ok(m.usage.input_tokens > 0 && m.usage.output_tokens > 0);
  assert.equal(typeof m.usage.cache_read_input_tokens, 'number');
  const again = await client.messages.create(req);
  assert.deepEqual(again.content, m.content);
});

test('messages stream: SDK helper accumulates the same message as the body', async () => {
  const req = { model: MODEL, max_tokens: 16, temperature: 0, system: 'Be brief.', messages: user('Tell me a story') };
  const whole = await client.messages.create(req);
  const stream = client.messages.stream(req);
  const types = [];
  stream.on('streamEvent', (e) => types.push(e.type));
  const final = await stream.finalMessage();
  assert.equal(types[0], 'message_start');
  assert.equal(types.at(-1), 'message_stop');
  assert.ok(types.includes('message_delta'));
  assert.deepEqual(final.content.map((b) => b.text), whole.content.map((b) => b.text));
  assert.equal(final.stop_reason, whole.stop_reason);
  assert.equal(final.usage.output_tokens, whole.usage.output_tokens);
});

test('raw stream events follow content_block_start / delta / stop', async () => {
  const stream = await client.messages.create({ model: MODEL, max_tokens: 8, messages: user('Hi'), stream: true });
  let open = null, blocks = 0;
  for await (const ev of stream) {
    if (ev.type === 'content_block_start') { assert.equal(open, null); open = ev.index; blocks++; }
    if (ev.type === 'content_block_delta') assert.equal(ev.index, open);
    if (ev.type === 'content_block_stop') { assert.equal(ev.index, open); open = null; }
    if (ev.type === 'message_delta') assert.ok(ev.delta.stop_reason);
  }
  assert.equal(open, null);
  assert.ok(blocks >= 1);
});

test('thinking on/off, stop_sequences, top_k', async () => {
  const on = await client.messages.create({ model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: user('2+2?') });
  assert.equal(on.content[0].type, 'thinking');
  const off = await client.messages.create({ model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'disabled' }, messages: user('2+2?') });
  assert.ok(off.content.every((b) => b.type === 'text'));
  const stream = client.messages.stream({ model: MODEL, max_tokens: 6, temperature: 0, thinking: { type: 'enabled', budget_tokens: 1024 }, messages: user('2+2?') });
  const final = await stream.finalMessage();
  assert.deepEqual(final.content.map((b) => b.thinking), on.content.map((b) => b.thinking));
  const m = await client.messages.create({ model: MODEL, max_tokens: 6, top_k: 5, stop_sequences: ['zzz'], messages: user('x') });
  assert.ok(['end_turn', 'max_tokens', 'stop_sequence'].includes(m.stop_reason));
});

test('tools: tool_use / tool_result round trip and tool_choice', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  for (const tool_choice of [{ type: 'auto' }, { type: 'any' }, { type: 'none' }, { type: 'tool', name: 'get_weather' }]) {
    const m = await client.messages.create({ model: MODEL, max_tokens: 4, tools, tool_choice, messages: user('Weather in Paris?') });
    assert.ok(['end_turn', 'max_tokens', 'tool_use'].includes(m.stop_reason));
  }
  const m = await client.messages.create({
    model: MODEL, max_tokens: 4, tools,
    messages: [
      ...user('Weather in Paris?'),
      { role: 'assistant', content: [{ type: 'text', text: 'Checking.' }, { type: 'tool_use', id: 'toolu_1', name: 'get_weather', input: { city: 'Paris' } }] },
      { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_1', content: 'sunny, 21C' }] },
    ],
  });
  assert.ok(m.usage.input_tokens + m.usage.cache_read_input_tokens > 20);
});

test('count_tokens counts what messages would read; models retrieve', async () => {
  const tools = [{ name: 'get_weather', description: 'Weather', input_schema: { type: 'object', properties: { city: { type: 'string' } } } }];
  const req = { model: MODEL, system: 'Be brief.', tools, messages: user('Weather in Paris, then a poem about it?') };
  const counted = await client.messages.countTokens(req);
  const m = await client.messages.create({ ...req, max_tokens: 1 });
  assert.equal(counted.input_tokens, m.usage.input_tokens + m.usage.cache_read_input_tokens);
  const bare = await client.messages.countTokens({ model: MODEL, messages: user('Weather in Paris, then a poem about it?') });
  assert.ok(bare.input_tokens < counted.input_tokens, 'the system prompt and tools count');
  await assert.rejects(client.messages.countTokens({ model: MODEL, messages: [] }), (e) => e instanceof Anthropic.BadRequestError);
  await assert.rejects(client.messages.countTokens({ model: 'claude-nope', messages: user('x') }), (e) => e instanceof Anthropic.NotFoundError);
  assert.equal((await client.models.retrieve(MODEL)).id, MODEL);
  await assert.rejects(client.models.retrieve('claude-nope'), (e) => e instanceof Anthropic.NotFoundError);
});

test('a last assistant message is a prefill the reply continues', async () => {
  const post = async (path, body) => {
    const res = await fetch(`${srv.url}${path}`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` }, body: JSON.stringify(body) });
    return res.json();
  };
  const prefill = 'Hello, my';
  const messages = [...user('Write a greeting'), { role: 'assistant', content: prefill }];
  // the prompt: the turn opened as for a plain reply, then the prefill's text
  const open = await post('/tokenize', { model: MODEL, messages: user('Write a greeting') });
  const text = (await post('/tokenize', { prompt: prefill })).tokens.slice(1); // no BOS
  const ids = [...open.tokens, ...text];
  const count = await client.messages.countTokens({ model: MODEL, messages });
  assert.equal(count.input_tokens, ids.length);
  const m = await client.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages });
  assert.equal(m.usage.input_tokens, ids.length);
  const c = await post('/v1/completions', { model: MODEL, prompt: ids, max_tokens: 8, temperature: 0 });
  assert.equal(m.content[0].text, c.choices[0].text, 'the reply continues the prefill, not a new turn');
  // an empty prefill opens the turn as no prefill does
  const empty = await client.messages.create({ model: MODEL, max_tokens: 8, temperature: 0, messages: [...user('Write a greeting'), { role: 'assistant', content: '' }] });
  assert.equal(empty.usage.input_tokens, open.count);
  await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 4, messages: [...user('x'), { role: 'assistant', content: 'ends with a space ' }] }),
    (e) => e.status === 400 && /trailing whitespace/.test(e.message));
});

test('structured outputs: output_config.format and the beta output_format hold the reply to a JSON schema', async () => {
  const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 1, maximum: 9 }, tag: { enum: ['a', 'b'] } }, required: ['n', 'tag'], additionalProperties: false };
  const req = { model: MODEL, max_tokens: 200, temperature: 1, messages: user('JSON please'), thinking: { type: 'disabled' } };
  const follows = (text) => {
    const o = JSON.parse(text);
    assert.deepEqual(Object.keys(o).sort(), ['n', 'tag'], text);
    assert.ok(Number.isInteger(o.n) && o.n >= 1 && o.n <= 9 && ['a', 'b'].includes(o.tag), text);
  };
  for (const seed of [1, 2, 3]) {
    const m = await client.messages.create({ ...req, seed, output_config: { format: { type: 'json_schema', schema } } });
    assert.equal(m.stop_reason, 'end_turn');
    assert.equal(m.content.length, 1);
    follows(m.content[0].text);
    const free = await client.messages.create({ ...req, seed });
    assert.throws(() => follows(free.content[0].text), 'without the format the reply is free');
  }
  const stream = client.messages.stream({ ...req, seed: 4, output_format: { type: 'json_schema', schema } });
  follows((await stream.finalMessage()).content[0].text);
  const bad = (body, re) => assert.rejects(client.messages.create({ ...req, ...body }), (e) => e.status === 400 && re.test(e.message));
  await bad({ output_config: { format: { type: 'text' } } }, /output_config\.format\.type: expected .*json_schema/);
  await bad({ output_format: { type: 'json_schema' } }, /output_format\.schema/);
  await bad({ output_config: { format: { type: 'json_schema', schema } }, messages: [...user('x'), { role: 'assistant', content: '{"n":' }] }, /continued/);
});

test('document blocks with a text source reach the prompt as their text', async () => {
  const ask = { type: 'text', text: 'What is the secret?' };
  const count = async (content) => (await client.messages.countTokens({ model: MODEL, messages: [{ role: 'user', content }] })).input_tokens;
  const asText = await count([{ type: 'text', text: 'Note\nA memo\n\nThe secret is 42.' }, ask]);
  const doc = { type: 'document', title: 'Note', context: 'A memo' };
  assert.equal(await count([{ ...doc, source: { type: 'text', media_type: 'text/plain', data: 'The secret is 42.' } }, ask]), asText);
  assert.equal(await count([{ ...doc, source: { type: 'content', content: [{ type: 'text', text: 'The secret is ' }, { type: 'text', text: '42.' }] } }, ask]), asText);
  const bare = await count([{ type: 'document', source: { type: 'text', media_type: 'text/plain', data: 'The secret is 42.' } }, ask]);
  assert.equal(bare, await count([{ type: 'text', text: 'The secret is 42.' }, ask]));
  // a media document stands as an image does (this test model has no image token: the same 400)
  const media = async (block) => client.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [block, ask] }] }).then(() => 'ok', (e) => e.message);
  assert.equal(await media({ type: 'document', source: { type: 'base64', media_type: 'application/pdf', data: 'JVBERi0=' } }),
    await media({ type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'iVBORw0=' } }));
  await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: [{ type: 'document', source: { type: 'text' } }] }] }),
    (e) => e.status === 400 && /source\.data/.test(e.message));
});

test('errors in the Anthropic shape', async () => {
  const anon = new Anthropic({ baseURL: srv.url, apiKey: 'nope', maxRetries: 0 });
  await assert.rejects(anon.messages.create({ model: MODEL, max_tokens: 5, messages: user('x') }), (e) => e instanceof Anthropic.AuthenticationError && e.error.type === 'error');
  await assert.rejects(client.messages.create({ model: 'claude-nope', max_tokens: 5, messages: user('x') }), (e) => e instanceof Anthropic.NotFoundError && e.error.error.type === 'not_found_error');
  await assert.rejects(client.messages.create({ model: MODEL, messages: user('x') }), (e) => e instanceof Anthropic.BadRequestError && /max_tokens/.test(e.message));
  await assert.rejects(client.messages.create({ model: MODEL, max_tokens: 5, messages: [{ role: 'robot', content: 'x' }] }), (e) => e.status === 400 && /messages\.0\.role/.test(e.message));
  const raw = await fetch(`${srv.url}/v1/messages`, { method: 'POST', headers: { 'x-api-key': KEY }, body: '{"model":' });
  assert.equal(raw.status, 400);
  const body = await raw.json();
  assert.equal(body.type, 'error');
  assert.equal(body.error.type, 'invalid_request_error');
});
