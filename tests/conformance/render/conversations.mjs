// conversations.mjs — a seeded, deterministic generator of chat conversations
// in deepinfer's conversation JSON shape (OpenAI-chat-like), shaped per model
// family so that each family's own Jinja chat template can render them.
//
// Family constraints come from the templates themselves: DeepSeek V3 renders
// tool calls only when the assistant content is null, and needs tool_calls
// whenever it is null; Qwen3 needs string content everywhere; Llama 3 has no
// tool calls. For Qwen3, assistant content and reasoning never start or end
// with spaces/tabs: there Python's str.lstrip('\n') (the template's meaning)
// and @huggingface/jinja's lstrip (which ignores its argument) differ.

export function rng(seed) {
  // mulberry32
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

const TEXTS = [
  'Hello!',
  "What's the weather in Paris tomorrow?",
  '',
  '  padded with spaces  ',
  'line one\nline two',
  '中文测试：你好，世界。',
  'emoji 🙂🚀 and café, naïve, Ångström',
  'مرحبا بالعالم',
  'tabs\tand "quotes" and \\backslashes\\',
  '{"json": [1, 2.5, null, true]}',
  'ends with a newline\n',
  '\nstarts with a newline',
  '<b>html</b> &amp; stuff',
  'multi\n\nparagraph\n\ntext',
  'ＦＵＬＬ　ＷＩＤＴＨ text',
  'a control char \u0001 inside',
  'spells <|im_start|>user and <｜User｜> and <|eot_id|>',
  'code:\n```python\nprint("hi")\n```',
];

const TOOLS = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Get the weather for a city. Returns °C.',
      parameters: {
        type: 'object',
        properties: {
          city: { type: 'string', description: 'City name, e.g. 北京' },
          days: { type: 'integer', minimum: 1, maximum: 14, default: 3 },
          units: { type: 'string', enum: ['metric', 'imperial'] },
        },
        required: ['city'],
      },
    },
  },
  {
    type: 'function',
    function: {
      name: 'search',
      description: 'Search the web.\nReturns "snippets".',
      parameters: {
        type: 'object',
        properties: {
          query: { type: 'string' },
          top_k: { type: 'number', default: 2.5, exclusiveMinimum: 0.001 },
          filters: { type: 'array', items: { type: 'string' }, default: [] },
          safe: { type: 'boolean', default: true },
          extra: { type: ['object', 'null'], default: null },
        },
      },
    },
  },
  { type: 'function', function: { name: 'now', description: 'Current time.', parameters: { type: 'object', properties: {} } } },
];

const ARGS = [
  '{"city": "Paris"}',
  '{"city": "北京", "days": 2}',
  '{"query": "deepinfer \\"quoted\\"", "top_k": 1.5, "filters": ["a", "b"], "safe": false}',
  '{}',
  '{"extra": {"nested": [1, {"x": null}]}}',
];

function pick(r, a) {
  return a[Math.floor(r() * a.length)];
}

// Qwen3-safe: no leading/trailing whitespace except newlines we add.
function qsafe(r, s) {
  s = s.replace(/^\s+|\s+$/gu, '');
  if (r() < 0.15) s = '\n' + s;
  if (r() < 0.15) s = s + '\n';
  return s;
}

function toolCalls(r, family, turn) {
  const n = 1 + Math.floor(r() * 2);
  const calls = [];
  for (let i = 0; i < n; i++) {
    const tool = pick(r, TOOLS).function.name;
    let args = pick(r, ARGS);
    // Qwen3's template prints non-string arguments through tojson.
    if (family === 'qwen3' && r() < 0.3) args = JSON.parse(args);
    calls.push({ id: `call_${turn}_${i}`, type: 'function', function: { name: tool, arguments: args } });
  }
  return calls;
}

function assistantMsg(r, family, turn, wantCalls) {
  const text = family === 'qwen3' ? qsafe(r, pick(r, TEXTS)) : pick(r, TEXTS);
  const m = { role: 'assistant', content: text };
  if (family === 'qwen3') {
    const u = r();
    if (u < 0.3) m.reasoning_content = qsafe(r, pick(r, TEXTS));
    else if (u < 0.45) m.content = `<think>\n${qsafe(r, pick(r, TEXTS))}\n</think>\n\n${m.content}`;
  }
  if (wantCalls) {
    m.tool_calls = toolCalls(r, family, turn);
    if (family === 'deepseek_v3') m.content = null;
    else if (family === 'qwen3' && r() < 0.5) m.content = '';
  }
  return m;
}

// One conversation for family 'deepseek_v3' | 'qwen3' | 'llama3'.
export function conversation(family, seed) {
  const r = rng(seed * 7919 + family.length);
  const messages = [];
  if (r() < 0.6) messages.push({ role: 'system', content: pick(r, TEXTS) });
  const turns = 1 + Math.floor(r() * 4);
  for (let t = 0; t < turns; t++) {
    if (r() < 0.1) messages.push({ role: 'system', content: pick(r, TEXTS) });
    let user = pick(r, TEXTS);
    if (family === 'qwen3' && r() < 0.1) user = `<tool_response>\n${user}\n</tool_response>`;
    messages.push({ role: 'user', content: user });
    const last = t === turns - 1;
    if (last && r() < 0.6) break; // end on a user turn
    const calls = family !== 'llama3' && r() < 0.45;
    const a = assistantMsg(r, family, t, calls);
    messages.push(a);
    if (calls) {
      for (const c of a.tool_calls)
        messages.push({ role: 'tool', tool_call_id: c.id, content: pick(r, TEXTS) });
      if (!last || r() < 0.5) messages.push(assistantMsg(r, family, t, false));
    } else if (family === 'llama3' && r() < 0.2) {
      messages.push({ role: 'tool', content: pick(r, TEXTS) });
    }
  }
  const conv = { messages, add_generation_prompt: r() < 0.7 };
  if (family !== 'llama3' && r() < 0.5) {
    const n = 1 + Math.floor(r() * TOOLS.length);
    conv.tools = TOOLS.slice(0, n);
  }
  if (family === 'qwen3') {
    const u = r();
    if (u < 0.33) conv.thinking = true;
    else if (u < 0.66) conv.thinking = false;
  }
  return conv;
}
