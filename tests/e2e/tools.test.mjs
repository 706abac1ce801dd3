// tools.test.mjs — tool calls held to their tools' schemas, through the
// official SDKs: servers in DeepSeek V3's format (calls written as JSON
// between its markers) and in DeepSeek V4's (DSML parameters) with a
// random-weight model, which on its own never writes a call (tool_choice
// auto shows it), must under tool_choice required / any / a named tool
// answer with calls of the offered tools whose arguments the tools' schemas
// take — streamed and not, in Chat Completions, Responses and Messages.
// The schemas are checked here by hand, an oracle independent of the
// server's decoder.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import OpenAI from 'openai';
import Anthropic from '@anthropic-ai/sdk';
import { startServer, MODEL } from './server.mjs';

const FORMATS = ['deepseek-v3', 'deepseek-v4'];
const servers = {};
before(async () => {
  for (const format of FORMATS) {
    const srv = await startServer(['--format', format, '--max-model-len', '2048']);
    servers[format] = {
      srv,
      openai: new OpenAI({ baseURL: `${srv.url}/v1`, apiKey: 'k', maxRetries: 0 }),
      anthropic: new Anthropic({ baseURL: srv.url, apiKey: 'k', maxRetries: 0 }),
    };
  }
});
after(async () => { for (const f of FORMATS) assert.equal(await servers[f].srv.stop(), 0); });

const WEATHER = {
  type: 'object',
  properties: { city: { type: 'string', maxLength: 12 }, days: { type: 'integer', minimum: 1, maximum: 7 } },
  required: ['city', 'days'],
  additionalProperties: false,
};
const TIME = { properties: { zone: { enum: ['UTC', 'CET', 'JST'] } }, required: ['zone'] }; // no "type": an object all the same
const SCHEMAS = { get_weather: WEATHER, get_time: TIME };
const chatTools = Object.entries(SCHEMAS).map(([name, parameters]) => ({ type: 'function', function: { name, description: name, parameters } }));
const user = [{ role: 'user', content: 'What is the weather in Paris this week, and the time?' }];

// The arguments (JSON text, or an object) against the tool's schema.
function checkCall(name, args) {
  assert.ok(name in SCHEMAS, `a call of an offered tool, not ${name}`);
  const a = typeof args === 'string' ? JSON.parse(args) : args;
  assert.equal(typeof a, 'object');
  assert.ok(a !== null && !Array.isArray(a));
  if (name === 'get_weather') {
    assert.deepEqual(Object.keys(a).sort(), ['city', 'days']);
    assert.equal(typeof a.city, 'string');
    assert.ok([...a.city].length <= 12, `maxLength: ${a.city}`);
    assert.ok(Number.isInteger(a.days) && a.days >= 1 && a.days <= 7, `days ${a.days}`);
  } else {
    assert.ok(['UTC', 'CET', 'JST'].includes(a.zone), `zone ${a.zone}`);
  }
}

for (const format of FORMATS) {
  test(`${format}: tool_choice auto: the model on its own writes no call`, async () => {
      const { openai, anthropic } = servers[format];
    for (const seed of [1, 2, 3]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools, tool_choice: 'auto', max_tokens: 60, seed, temperature: 1 });
      assert.equal(r.choices[0].message.tool_calls, undefined);
    }
  });

  test(`${format}: tool_choice auto with a strict tool: text answers stay free`, async () => {
      const { openai, anthropic } = servers[format];
    const strictTools = chatTools.map((t) => ({ ...t, function: { ...t.function, strict: true } }));
    for (const seed of [1, 2]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: strictTools, max_tokens: 40, seed, temperature: 1 });
      assert.equal(r.choices[0].message.tool_calls, undefined);
      assert.ok(r.choices[0].message.content.length > 0);
      assert.ok(['stop', 'length'].includes(r.choices[0].finish_reason));
    }
  });

  test(`${format}: chat: required gives calls the schemas take, streamed or not`, async () => {
      const { openai, anthropic } = servers[format];
    let calls = 0;
    for (const seed of [1, 2, 3, 4]) {
      const req = { model: MODEL, messages: user, tools: chatTools, tool_choice: 'required', parallel_tool_calls: false, max_tokens: 400, seed, temperature: 1 };
      const r = await openai.chat.completions.create(req);
      const tc = r.choices[0].message.tool_calls;
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.equal(tc.length, 1, 'parallel_tool_calls false: one call');
      for (const c of tc) checkCall(c.function.name, c.function.arguments);
      calls += tc.length;
      // the same, streamed: the deltas add up to the same call
      const stream = await openai.chat.completions.create({ ...req, stream: true });
      const args = {};
      const names = {};
      let finish;
      for await (const chunk of stream) {
        const ch = chunk.choices[0];
        if (ch?.finish_reason) finish = ch.finish_reason;
        for (const d of ch?.delta?.tool_calls ?? []) {
          if (d.function?.name) names[d.index] = d.function.name;
          args[d.index] = (args[d.index] ?? '') + (d.function?.arguments ?? '');
        }
      }
      assert.equal(finish, 'tool_calls');
      assert.deepEqual(Object.values(names), tc.map((c) => c.function.name));
      assert.deepEqual(Object.values(args), tc.map((c) => c.function.arguments));
    }
    assert.equal(calls, 4);
  });

  test(`${format}: chat: a named tool is the one called; parallel calls all follow their schemas`, async () => {
      const { openai, anthropic } = servers[format];
    for (const seed of [5, 6]) {
      const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools, tool_choice: { type: 'function', function: { name: 'get_time' } }, max_tokens: 300, seed, temperature: 1 });
      const tc = r.choices[0].message.tool_calls;
      assert.equal(r.choices[0].finish_reason, 'tool_calls');
      assert.equal(tc.length, 1);
      assert.equal(tc[0].function.name, 'get_time');
      checkCall('get_time', tc[0].function.arguments);
    }
    const r = await openai.chat.completions.create({ model: MODEL, messages: user, tools: chatTools, tool_choice: 'required', max_tokens: 1200, seed: 9, temperature: 1 });
    const tc = r.choices[0].message.tool_calls;
    assert.ok(tc.length >= 1 && tc.length <= 8, `${tc.length} calls`);
    for (const c of tc) checkCall(c.function.name, c.function.arguments);
  });

  test(`${format}: allowed_tools: required calls only the allowed tool, every tool still offered`, async () => {
    const { openai } = servers[format];
    for (const seed of [7, 8]) {
      const r = await openai.chat.completions.create({
        model: MODEL, messages: user, tools: chatTools, max_tokens: 600, seed, temperature: 1,
        tool_choice: { type: 'allowed_tools', allowed_tools: { mode: 'required', tools: [{ type: 'function', function: { name: 'get_time' } }] } },
      });
      const tc = r.choices[0].message.tool_calls;
      assert.ok(tc.length >= 1);
      for (const c of tc) {
        assert.equal(c.function.name, 'get_time');
        checkCall(c.function.name, c.function.arguments);
      }
      assert.ok(r.usage.prompt_tokens > (await openai.chat.completions.create({ model: MODEL, messages: user, tools: [chatTools[1]], max_tokens: 1 })).usage.prompt_tokens, 'both tools in the prompt');
    }
  });

  test(`${format}: structured output with tools: the reply is its JSON or valid calls`, async () => {
    const { openai } = servers[format];
    const schema = { type: 'object', properties: { answer: { type: 'string', maxLength: 8 }, sure: { type: 'boolean' } }, required: ['answer', 'sure'], additionalProperties: false };
    let answers = 0, calls = 0;
    for (const seed of [1, 2, 3, 4, 5, 6]) {
      const r = await openai.chat.completions.create({
        model: MODEL, messages: user, tools: chatTools, max_tokens: 400, seed, temperature: 1,
        response_format: { type: 'json_schema', json_schema: { name: 'reply', schema, strict: true } },
      });
      const m = r.choices[0].message;
      if (m.tool_calls) {
        calls++;
        for (const c of m.tool_calls) checkCall(c.function.name, c.function.arguments);
        continue;
      }
      answers++;
      const a = JSON.parse(m.content);
      assert.deepEqual(Object.keys(a).sort(), ['answer', 'sure'], m.content);
      assert.ok(typeof a.answer === 'string' && [...a.answer].length <= 8 && typeof a.sure === 'boolean', m.content);
    }
    assert.equal(answers + calls, 6);
  });

  test(`${format}: responses and messages: forced calls follow the schemas too`, async () => {
      const { openai, anthropic } = servers[format];
    const rtools = Object.entries(SCHEMAS).map(([name, parameters]) => ({ type: 'function', name, parameters }));
    const resp = await openai.responses.create({ model: MODEL, input: user[0].content, tools: rtools, tool_choice: 'required', parallel_tool_calls: false, max_output_tokens: 400, temperature: 1 });
    const fc = resp.output.filter((o) => o.type === 'function_call');
    assert.equal(fc.length, 1);
    checkCall(fc[0].name, fc[0].arguments);

    const atools = Object.entries(SCHEMAS).map(([name, input_schema]) => ({ name, input_schema }));
    for (const tool_choice of [{ type: 'any', disable_parallel_tool_use: true }, { type: 'tool', name: 'get_weather' }]) {
      const m = await anthropic.messages.create({ model: MODEL, max_tokens: 400, messages: user, tools: atools, tool_choice, temperature: 1 });
      const uses = m.content.filter((b) => b.type === 'tool_use');
      assert.equal(m.stop_reason, 'tool_use');
      assert.equal(uses.length, 1);
      if (tool_choice.name) assert.equal(uses[0].name, 'get_weather');
      checkCall(uses[0].name, uses[0].input);
    }
  });
}
