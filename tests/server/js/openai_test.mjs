// Drives `k3 serve` with the official `openai` npm client.  Usage: node openai_test.mjs BASE_URL PNG
// Exits non-zero (with the failing check) on any mismatch; prints "openai client: all checks passed".
import fs from 'node:fs';
import OpenAI from 'openai';

const [base, pngPath] = process.argv.slice(2);
const client = new OpenAI({ baseURL: base + '/v1', apiKey: 'not-needed', maxRetries: 0, timeout: 120000 });
let checks = 0;
function check(cond, what, detail) {
  checks++;
  if (!cond) throw new Error('check failed: ' + what + (detail === undefined ? '' : ': ' + JSON.stringify(detail)));
}
const user = (content) => [{ role: 'user', content }];

// Models.
const models = await client.models.list();
check(models.data.length === 1 && models.data[0].id === 'm', 'models.list', models.data);
check(models.data[0].owned_by === 'k3' && models.data[0].context_length === 512, 'model card', models.data[0]);

// Chat, non-stream, thinking off.
const plain = await client.chat.completions.create({
  model: 'm', messages: user('Hello there'), max_tokens: 10, temperature: 0,
  chat_template_kwargs: { thinking: false },
});
check(plain.object === 'chat.completion', 'object', plain.object);
const msg = plain.choices[0].message;
check(msg.role === 'assistant', 'role', msg);
check(msg.reasoning_content === null, 'no reasoning when thinking is off', msg);
check(['stop', 'length'].includes(plain.choices[0].finish_reason), 'finish_reason', plain.choices[0]);
const u = plain.usage;
check(u.total_tokens === u.prompt_tokens + u.completion_tokens && u.completion_tokens >= 1 && u.completion_tokens <= 10,
  'usage', u);
check(u.completion_tokens_details.reasoning_tokens === 0, 'reasoning_tokens', u);

// The same request streamed: same token count, same finish_reason, usage chunk last.
const stream = await client.chat.completions.create({
  model: 'm', messages: user('Hello there'), max_tokens: 10, temperature: 0,
  chat_template_kwargs: { thinking: false }, stream: true, stream_options: { include_usage: true },
});
let content = '', finish = null, usage = null, chunks = 0;
for await (const chunk of stream) {
  chunks++;
  check(chunk.object === 'chat.completion.chunk', 'chunk object', chunk);
  if (chunk.usage) usage = chunk.usage;
  const c = chunk.choices[0];
  if (!c) continue;
  if (c.delta.content) content += c.delta.content;
  check(!c.delta.reasoning_content, 'no reasoning deltas when thinking is off', c.delta);
  if (c.finish_reason) finish = c.finish_reason;
}
check(chunks >= 3, 'stream chunks', chunks);
check(finish === plain.choices[0].finish_reason, 'stream finish_reason', [finish, plain.choices[0].finish_reason]);
check(usage && usage.completion_tokens === u.completion_tokens && usage.prompt_tokens === u.prompt_tokens,
  'stream usage', [usage, u]);
if (msg.content !== null && plain.choices[0].finish_reason === 'length') {
  check(content === msg.content, 'streamed content equals the non-streamed content', [content, msg.content]);
}

// Reasoning split: thinking on streams reasoning_content first; usage counts reasoning tokens.
const think = await client.chat.completions.create({
  model: 'm', messages: user('Why is the sky blue?'), max_tokens: 12, temperature: 0, reasoning_effort: 'high',
  stream: true, stream_options: { include_usage: true },
});
let reasoning = '', answer = '', tusage = null;
for await (const chunk of think) {
  if (chunk.usage) tusage = chunk.usage;
  const d = chunk.choices[0]?.delta;
  if (d?.reasoning_content) {
    check(answer === '', 'reasoning comes before content', answer);
    reasoning += d.reasoning_content;
  }
  if (d?.content) answer += d.content;
}
check(reasoning.length > 0, 'reasoning_content streamed', reasoning);
check(tusage.completion_tokens_details.reasoning_tokens > 0 &&
  tusage.completion_tokens_details.reasoning_tokens <= tusage.completion_tokens, 'reasoning usage', tusage);
const nonStreamThink = await client.chat.completions.create({
  model: 'm', messages: user('Why is the sky blue?'), max_tokens: 12, temperature: 0, reasoning_effort: 'high',
});
check('reasoning_content' in nonStreamThink.choices[0].message, 'reasoning_content field', nonStreamThink.choices[0]);
// The same request, not streamed, gives the reply it streamed, channel by channel, and the same usage.
const whole = nonStreamThink.choices[0].message;
check(whole.reasoning_content === (reasoning || null) && whole.content === (answer || null),
  'non-streamed reasoning_content / content equal the streamed ones', [whole, reasoning, answer]);
check(nonStreamThink.usage.completion_tokens === tusage.completion_tokens &&
  nonStreamThink.usage.completion_tokens_details.reasoning_tokens === tusage.completion_tokens_details.reasoning_tokens,
  'non-streamed usage equals the streamed usage', [nonStreamThink.usage, tusage]);

// Tool calls: the K3 reply format parsed into tool_calls (through /detokenize's chat format), then
// the round trip of that assistant message and the tool's result into the next request.
const tools = [{
  type: 'function',
  function: {
    name: 'get_weather', description: 'Weather forecast for a city',
    parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] },
  },
}];
const reply = 'Checking.<|close|>think<|sep|><|open|>tools<|sep|><|open|>call tool="get_weather" index="0"<|sep|>' +
  '<|open|>argument key="city" type="string"<|sep|>Oslo<|close|>argument<|sep|><|close|>call<|sep|>' +
  '<|close|>tools<|sep|><|close|>message<|sep|><|end_of_msg|>';
const post = async (path, body) => (await fetch(base + path, {
  method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body),
})).json();
const ids = (await post('/tokenize', { prompt: reply })).tokens;
const parsed = (await post('/detokenize', { tokens: ids, chat_format: true })).message;
check(parsed.tool_calls?.length === 1 && parsed.tool_calls[0].function.name === 'get_weather' &&
  JSON.parse(parsed.tool_calls[0].function.arguments).city === 'Oslo', 'parsed tool call', parsed);
const round = await client.chat.completions.create({
  model: 'm', tools, tool_choice: 'auto', max_tokens: 6, temperature: 0,
  messages: [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, reasoning_content: parsed.reasoning_content, tool_calls: parsed.tool_calls },
    { role: 'tool', tool_call_id: parsed.tool_calls[0].id, content: '{"temp": 12}' },
  ],
});
check(round.choices[0].message.role === 'assistant', 'tool round trip', round);
const rendered = await post('/tokenize', {
  messages: [
    { role: 'user', content: 'Weather in Oslo?' },
    { role: 'assistant', content: null, tool_calls: parsed.tool_calls },
    { role: 'tool', tool_call_id: parsed.tool_calls[0].id, content: '{"temp": 12}' },
  ], tools,
});
const text = (await post('/detokenize', { tokens: rendered.tokens })).prompt;
check(text.includes('call tool="get_weather"') && text.includes('Oslo') && text.includes('{"temp": 12}'),
  'the tool call and result are in the next prompt', text);

// Greedy replies cut by max_tokens at every point read the same streamed or not: channel by
// channel (inside the think block, inside the answer, inside a forced tool call) and in usage.
async function streamed(body) {
  const st = await client.chat.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  let content = '', reasoning = '', usage = null, finish = null;
  const calls = [];
  for await (const chunk of st) {
    if (chunk.usage) usage = chunk.usage;
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.finish_reason) finish = c.finish_reason;
    if (c.delta.content) content += c.delta.content;
    if (c.delta.reasoning_content) reasoning += c.delta.reasoning_content;
    for (const t of c.delta.tool_calls ?? []) {
      calls[t.index] ??= { name: '', arguments: '' };
      if (t.function?.name) calls[t.index].name += t.function.name;
      if (t.function?.arguments) calls[t.index].arguments += t.function.arguments;
    }
  }
  return { content: content || null, reasoning: reasoning || null, calls, usage, finish };
}
const cutCases = [
  { what: 'thinking on', body: { messages: user('Why is the sky blue?'), reasoning_effort: 'high' }, full: 40 },
  { what: 'thinking off', body: { messages: user('Hello there'), chat_template_kwargs: { thinking: false } }, full: 40 },
  { what: 'required tool call', body: { messages: user('Weather in Oslo?'), tools, tool_choice: 'required' }, full: 140 },
];
for (const { what, body, full } of cutCases) {
  for (let max = 1; max <= full; max += max < 24 ? 1 : 7) {
    const b = { model: 'm', temperature: 0, max_tokens: max, ...body };
    const whole = await client.chat.completions.create(b);
    const m = whole.choices[0].message;
    const st = await streamed(b);
    const at = `${what}, max_tokens ${max}`;
    check(st.content === m.content, at + ': content', [st.content, m.content]);
    check(st.reasoning === (m.reasoning_content ?? null), at + ': reasoning_content', [st.reasoning, m.reasoning_content]);
    const wholeCalls = (m.tool_calls ?? []).map((t) => ({ name: t.function.name, arguments: t.function.arguments }));
    check(JSON.stringify(st.calls) === JSON.stringify(wholeCalls), at + ': tool_calls', [st.calls, wholeCalls]);
    check(st.finish === whole.choices[0].finish_reason, at + ': finish_reason', [st.finish, whole.choices[0].finish_reason]);
    check(st.usage.completion_tokens === whole.usage.completion_tokens &&
      st.usage.completion_tokens_details.reasoning_tokens === whole.usage.completion_tokens_details.reasoning_tokens,
      at + ': usage', [st.usage, whole.usage]);
    // A required call is the whole answer: no content, and a cut call never shows up as markup there.
    if (body.tool_choice === 'required') check(m.content === null, at + ': no content beside a required call', m);
  }
}
const required = await client.chat.completions.create({ model: 'm', temperature: 0, max_tokens: 140,
  messages: user('Weather in Oslo?'), tools, tool_choice: 'required' });
check(required.choices[0].finish_reason === 'tool_calls' && required.choices[0].message.tool_calls.length >= 1,
  'tool_choice required gives a call within max_tokens on the random model', required.choices[0]);

// Completions API.
const comp = await client.completions.create({ model: 'm', prompt: 'Once upon a time', max_tokens: 5, temperature: 0 });
check(comp.object === 'text_completion' && typeof comp.choices[0].text === 'string' && comp.usage.completion_tokens <= 5,
  'completion', comp);

// An image as a data: URL.
const png = fs.readFileSync(pngPath).toString('base64');
const img = await client.chat.completions.create({
  model: 'm', max_tokens: 4, temperature: 0,
  messages: [{ role: 'user', content: [
    { type: 'text', text: 'Describe this image.' },
    { type: 'image_url', image_url: { url: 'data:image/png;base64,' + png } },
  ] }],
});
check(img.usage.prompt_tokens > u.prompt_tokens, 'image tokens counted', img.usage);

// Errors surface as APIError with the right status, message and param.
async function expectError(fn, status, param, what) {
  try {
    await fn();
  } catch (e) {
    check(e instanceof OpenAI.APIError, what + ': APIError', String(e));
    check(e.status === status, what + ': status', [e.status, e.message]);
    if (param) check(e.param === param, what + ': param', [e.param, e.message]);
    return e;
  }
  check(false, what + ': expected an error');
}
const e1 = await expectError(() => client.chat.completions.create({ model: 'nope', messages: user('x') }), 404,
  'model', 'unknown model');
check(e1 instanceof OpenAI.NotFoundError && e1.code === 'model_not_found', 'NotFoundError model_not_found',
  [e1.constructor.name, e1.code]);
const e2 = await expectError(() => client.chat.completions.create({ model: 'm', messages: user('x'),
  reasoning_effort: 'minimal' }), 400, 'reasoning_effort', 'an effort K3 does not have');
const medium = await client.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 2,
  reasoning_effort: 'medium' });
check(medium.choices.length === 1, 'reasoning_effort medium (OpenAI default) is accepted', medium);
await expectError(() => client.chat.completions.create({ model: 'm', messages: user('x'), n: 17 }), 400, 'n', 'n=17');
const two = await client.chat.completions.create({ model: 'm', messages: user('x'), n: 2, max_tokens: 3, seed: 1 });
check(two.choices.length === 2 && two.choices[0].index === 0 && two.choices[1].index === 1, 'n=2 choices', two);
await expectError(() => client.chat.completions.create({ model: 'm', messages: user('x'), logprobs: true,
  top_logprobs: 21 }), 400, 'top_logprobs', 'top_logprobs above 20');
const lp = await client.chat.completions.create({ model: 'm', messages: user('x'), max_tokens: 3, temperature: 0,
  logprobs: true, top_logprobs: 2 });
check(lp.choices[0].logprobs.content.length === lp.usage.completion_tokens, 'a logprob per token', lp.choices[0]);
check(lp.choices[0].logprobs.content.every((e) => e.logprob <= 0 && e.top_logprobs.length === 2 &&
  Array.isArray(e.bytes)), 'logprob entries', lp.choices[0].logprobs);
await expectError(() => client.chat.completions.create({ model: 'm', messages: user('x'), temperature: 'hot' }), 400,
  'temperature', 'wrong type');
await expectError(() => client.chat.completions.create({ model: 'm', messages: user('word '.repeat(2000)) }), 400,
  'messages', 'prompt longer than the context');
await expectError(() => client.chat.completions.create({
  model: 'm', messages: [{ role: 'user', content: [{ type: 'image_url', image_url: { url: 'https://x.invalid/a.png' } }] }],
}), 400, 'messages', 'http image URL');
await expectError(() => client.models.retrieve('other'), 404, null, 'unknown model id');
const s = await expectError(async () => {
  const st = await client.chat.completions.create({ model: 'm', messages: user('x'), stream: true, n: 30 });
  for await (const _ of st) { /* not reached */ }
}, 400, 'n', 'streamed request error');
check(s instanceof OpenAI.BadRequestError, 'stream BadRequestError');

console.log(`openai client: all checks passed (${checks} checks)`);
