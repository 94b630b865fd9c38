// The k3 chat page: multi-turn chat against /v1/chat/completions, streamed with fetch + SSE
// parsing; the think channel (reasoning_content) goes into a folded <details>.  No dependencies.
'use strict';

const $ = (id) => document.getElementById(id);
// key: the API key the page sends (kept in localStorage); loads: numbers the /v1/models polls so
// that only the latest one updates the page; retry: the timer of the next poll.
const state = { model: null, messages: [], controller: null, key: '', loads: 0, retry: null };

function headers() {
  const h = { 'Content-Type': 'application/json' };
  if (state.key) h['Authorization'] = 'Bearer ' + state.key;
  return h;
}

// The server answered 401 (started with --api-key): shows the key field and waits for a key.
function askForKey() {
  state.model = null;
  $('model').textContent = 'API key needed';
  $('auth-status').textContent = state.key ? 'the server refused this key' : 'this server needs an API key';
  $('auth').hidden = false;
  $('api-key').focus();
}

async function loadModel() {
  const load = ++state.loads;
  clearTimeout(state.retry);
  try {
    const r = await fetch('/v1/models', { headers: headers() });
    const j = await r.json().catch(() => ({}));
    if (load !== state.loads) return;
    if (r.status === 401) return askForKey();  // no retry until a key is given
    if (!r.ok) throw new Error(j.error ? j.error.message : r.status + ' ' + r.statusText);
    state.model = j.data[0].id;
    $('model').textContent = state.model + ' · context ' + j.data[0].context_length;
    $('auth-status').textContent = '';
    $('auth').hidden = !state.key;  // a keyless server needs no field
  } catch (e) {
    if (load !== state.loads) return;
    $('model').textContent = 'not ready: ' + e.message;
    state.retry = setTimeout(loadModel, 1000);
  }
}

function bubble(role) {
  const div = document.createElement('div');
  div.className = 'msg ' + role;
  $('log').appendChild(div);
  return div;
}

function scrollDown() { $('log').scrollTop = $('log').scrollHeight; }

function readImage(file) {
  return new Promise((resolve, reject) => {
    const fr = new FileReader();
    fr.onload = () => resolve(fr.result);
    fr.onerror = () => reject(fr.error);
    fr.readAsDataURL(file);
  });
}

// Yields the JSON payload of every `data:` event of an SSE response body.
async function* sseEvents(body) {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += decoder.decode(value, { stream: true });
    let cut;
    while ((cut = buf.indexOf('\n\n')) >= 0) {
      const event = buf.slice(0, cut);
      buf = buf.slice(cut + 2);
      for (const line of event.split('\n')) {
        if (!line.startsWith('data:')) continue;  // comments (": waiting") and other fields
        const data = line.slice(5).trim();
        if (data === '[DONE]') return;
        yield JSON.parse(data);
      }
    }
  }
}

async function send(text, imageFile) {
  const user = bubble('user');
  user.textContent = text;
  let content = text;
  if (imageFile) {
    const url = await readImage(imageFile);
    const img = document.createElement('img');
    img.src = url;
    user.appendChild(img);
    content = [{ type: 'text', text }, { type: 'image_url', image_url: { url } }];
  }
  state.messages.push({ role: 'user', content });

  const out = bubble('assistant');
  const think = document.createElement('details');
  think.innerHTML = '<summary>Thinking</summary><div class="think"></div>';
  think.hidden = true;
  const answer = document.createElement('div');
  answer.className = 'answer';
  const meta = document.createElement('div');
  meta.className = 'meta';
  out.append(think, answer, meta);
  scrollDown();

  const thinking = $('thinking').checked;
  const body = {
    model: state.model || undefined,
    messages: state.messages,
    stream: true,
    stream_options: { include_usage: true },
    max_tokens: Number($('max-tokens').value) || 512,
    temperature: Number($('temperature').value),
    chat_template_kwargs: { thinking },
  };
  if (thinking) body.reasoning_effort = $('effort').value;

  state.controller = new AbortController();
  $('send').disabled = true;
  $('stop').disabled = false;
  let reasoning = '', reply = '', finish = null;
  try {
    const r = await fetch('/v1/chat/completions', {
      method: 'POST', headers: headers(), body: JSON.stringify(body), signal: state.controller.signal,
    });
    if (!r.ok) {
      if (r.status === 401) askForKey();
      const j = await r.json().catch(() => ({}));
      throw new Error(j.error ? j.error.message : r.status + ' ' + r.statusText);
    }
    for await (const ev of sseEvents(r.body)) {
      if (ev.error) throw new Error(ev.error.message);
      if (ev.usage) meta.textContent = ev.usage.completion_tokens + ' tokens';
      const choice = ev.choices && ev.choices[0];
      if (!choice) continue;
      const d = choice.delta || {};
      if (d.reasoning_content) {
        reasoning += d.reasoning_content;
        think.hidden = false;
        think.querySelector('.think').textContent = reasoning;
      }
      if (d.content) {
        reply += d.content;
        answer.textContent = reply;
      }
      for (const call of d.tool_calls || []) {
        answer.textContent += '\n[tool call ' + call.function.name + '(' + call.function.arguments + ')]';
      }
      if (choice.finish_reason) finish = choice.finish_reason;
      scrollDown();
    }
    if (finish === 'length') meta.textContent += ' (cut at max tokens)';
  } catch (e) {
    if (e.name !== 'AbortError') {
      out.classList.add('error');
      meta.textContent = 'error: ' + e.message;
    } else {
      meta.textContent += ' (stopped)';
    }
  } finally {
    state.messages.push({ role: 'assistant', content: reply });
    state.controller = null;
    $('send').disabled = false;
    $('stop').disabled = true;
  }
}

function showImageName() {
  const file = $('image').files[0];
  $('image-name').textContent = file ? 'Image: ' + file.name : 'Attach image';
}

$('composer').addEventListener('submit', (e) => {
  e.preventDefault();
  const text = $('input').value.trim();
  const file = $('image').files[0];
  if (!text || state.controller) return;
  $('input').value = '';
  $('image').value = '';
  showImageName();
  send(text, file);
});
$('input').addEventListener('keydown', (e) => {
  if (e.key === 'Enter' && !e.shiftKey) {
    e.preventDefault();
    $('composer').requestSubmit();
  }
});
$('stop').addEventListener('click', () => state.controller && state.controller.abort());
$('new-chat').addEventListener('click', () => {
  if (state.controller) state.controller.abort();
  state.messages = [];
  $('log').innerHTML = '';
});
$('image').addEventListener('change', showImageName);
$('auth').addEventListener('submit', (e) => {
  e.preventDefault();
  state.key = $('api-key').value.trim();
  if (state.key) localStorage.setItem('k3-api-key', state.key);
  else localStorage.removeItem('k3-api-key');
  $('model').textContent = 'connecting…';
  $('auth-status').textContent = '';
  loadModel();
});
state.key = localStorage.getItem('k3-api-key') || '';
$('api-key').value = state.key;
$('auth').hidden = !state.key;  // until the server asks for a key
loadModel();
