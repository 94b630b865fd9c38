// Loads the chat page of `k3 serve` in Debian's headless Chromium (driven by playwright-core),
// sends two messages and checks that the replies stream in (text grows over several updates) and
// that the second request carries the whole conversation.  Also: the image button's label is not
// cut at a narrow and a wide viewport, the favicon is served (/favicon.ico and the page's icon
// link), and no request of the page gets a 404.  With API_KEY (a server started with --api-key):
// the key field shows, a wrong key is refused, the right one is sent as a bearer token on every
// request and is remembered across a reload; without it the key field stays hidden.
// Usage: node browser_test.mjs BASE_URL [API_KEY]    Prints "browser: all checks passed".
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const [base, apiKey] = process.argv.slice(2);
const userDataDir = fs.mkdtempSync(path.join(os.tmpdir(), 'k3-chromium-'));
const context = await chromium.launchPersistentContext(userDataDir, {
  executablePath: '/usr/bin/chromium',
  headless: true,
  args: ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
    '--disable-background-networking', '--disable-component-update', '--disable-sync'],
});
let failed = null;
try {
  const page = context.pages()[0] || await context.newPage();
  const bodies = [];
  const auths = [];
  page.on('request', (r) => {
    if (!r.url().endsWith('/v1/chat/completions')) return;
    bodies.push(JSON.parse(r.postData()));
    auths.push(r.headers()['authorization']);
  });
  const statuses = [];  // [url, status] of every response the page got
  page.on('response', (r) => statuses.push([r.url(), r.status()]));
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  const modelLoaded = () => page.waitForFunction(
    () => document.getElementById('model').textContent.startsWith('m '), null, { timeout: 30000 });
  await page.goto(base + '/');
  if (apiKey) {
    // The server asks for a key: the field shows; a wrong key is refused, the right one loads the model.
    await page.waitForFunction(() => document.getElementById('model').textContent === 'API key needed', null,
      { timeout: 30000 });
    if (!await page.isVisible('#api-key')) throw new Error('the API key field is not shown on a server with --api-key');
    await page.fill('#api-key', 'wrong-' + apiKey);
    await page.press('#api-key', 'Enter');
    await page.waitForFunction(() => document.getElementById('auth-status').textContent.includes('refused'), null,
      { timeout: 10000 });
    await page.fill('#api-key', apiKey);
    await page.press('#api-key', 'Enter');
    await modelLoaded();
    if (!await page.isVisible('#api-key')) throw new Error('the API key field should stay shown once a key is used');
    const stored = await page.evaluate(() => localStorage.getItem('k3-api-key'));
    if (stored !== apiKey) throw new Error('the key is not kept in localStorage: ' + stored);
  } else {
    await modelLoaded();
    if (await page.isVisible('#auth')) throw new Error('the API key field shows on a server without --api-key');
  }

  // The image button's label is not cut, at a narrow and a wide viewport, with and without a
  // long file name chosen.
  const labelCut = async (what) => {
    const l = await page.evaluate(() => {
      const e = document.querySelector('.attach');
      return { text: e.innerText, scrollWidth: e.scrollWidth, clientWidth: e.clientWidth,
        right: e.getBoundingClientRect().right, viewport: window.innerWidth };
    });
    if (!(l.clientWidth > 0 && l.scrollWidth <= l.clientWidth && l.right <= l.viewport))
      throw new Error('the image button label is cut (' + what + '): ' + JSON.stringify(l));
    return l.text;
  };
  for (const [width, height] of [[360, 640], [1280, 800]]) {
    await page.setViewportSize({ width, height });
    const text = await labelCut(width + 'px');
    if (text !== 'Attach image') throw new Error('unexpected image button label: ' + text);
    const name = 'a-rather-long-name-for-a-holiday-photo-' + width + '.png';
    await page.setInputFiles('#image', { name, mimeType: 'image/png', buffer: Buffer.from('not read') });
    const chosen = await labelCut(width + 'px, a file chosen');
    if (!chosen.replace(/\s/g, '').includes(name)) throw new Error('the label does not name the file: ' + chosen);
    await page.setInputFiles('#image', []);
    await page.waitForFunction(() => document.getElementById('image-name').textContent === 'Attach image');
  }

  // The favicon, as Chromium fetches and decodes it: /favicon.ico and the page's <link rel=icon>.
  const iconHref = await page.getAttribute('link[rel=icon]', 'href');
  for (const url of ['/favicon.ico', iconHref]) {
    const icon = await page.evaluate(async (u) => {
      const r = await fetch(u);
      const body = await r.text();
      const decoded = await new Promise((resolve) => {
        const img = new Image();
        img.onload = () => resolve(true);
        img.onerror = () => resolve(false);
        img.src = u;
      });
      return { status: r.status, type: r.headers.get('content-type'), svg: body.includes('<svg'), decoded };
    }, url);
    if (icon.status !== 200 || icon.type !== 'image/svg+xml' || !icon.svg || !icon.decoded)
      throw new Error('favicon ' + url + ': ' + JSON.stringify(icon));
  }

  await page.click('#settings summary');  // the settings start folded
  await page.fill('#max-tokens', '40');
  await page.fill('#temperature', '0');

  // Counts how often the assistant bubble's text changes while the reply streams.
  await page.evaluate(() => {
    window.__updates = 0;
    new MutationObserver(() => { window.__updates++; })
      .observe(document.getElementById('log'), { subtree: true, childList: true, characterData: true });
  });
  for (const [turn, text] of [[1, 'Hello from the browser test'], [2, 'And a second message']]) {
    await page.fill('#input', text);
    await page.click('#send');
    await page.waitForFunction((n) => {
      const bubbles = document.querySelectorAll('.msg.assistant');
      if (bubbles.length < n) return false;
      const b = bubbles[n - 1];
      return (b.querySelector('.think').textContent + b.querySelector('.answer').textContent).length > 0;
    }, turn, { timeout: 60000 });
    await page.waitForFunction(() => !document.getElementById('send').disabled, null, { timeout: 60000 });
    const last = await page.evaluate((n) => {
      const b = document.querySelectorAll('.msg.assistant')[n - 1];
      return { error: b.classList.contains('error'), meta: b.querySelector('.meta').textContent,
        think: b.querySelector('.think').textContent, thinkHidden: b.querySelector('details').hidden,
        thinkOpen: b.querySelector('details').open, answer: b.querySelector('.answer').textContent };
    }, turn);
    if (last.error) throw new Error('turn ' + turn + ' shows an error: ' + last.meta);
    if (!/\d+ tokens/.test(last.meta)) throw new Error('turn ' + turn + ': no usage shown: ' + JSON.stringify(last));
    if (last.think.length > 0 && (last.thinkHidden || last.thinkOpen))
      throw new Error('the think channel should be shown folded: ' + JSON.stringify(last));
  }
  const updates = await page.evaluate(() => window.__updates);
  if (updates < 6) throw new Error('the replies did not stream (only ' + updates + ' page updates)');
  if (bodies.length !== 2) throw new Error('expected 2 chat requests, saw ' + bodies.length);
  if (!bodies[0].stream || bodies[1].messages.length !== 3 || bodies[1].messages[1].role !== 'assistant')
    throw new Error('the second request should carry the conversation: ' + JSON.stringify(bodies[1].messages));
  if (apiKey) {
    if (auths.some((a) => a !== 'Bearer ' + apiKey))
      throw new Error('a chat request did not carry the key: ' + JSON.stringify(auths));
    // A reload uses the stored key at once: the model loads without a 401.
    const before = statuses.length;
    await page.reload();
    await modelLoaded();
    const refused = statuses.slice(before).filter(([, status]) => status === 401);
    if (refused.length) throw new Error('the stored key was not used after a reload: ' + JSON.stringify(refused));
    if (!await page.isVisible('#api-key')) throw new Error('the API key field is not shown after a reload');
  } else if (auths.some((a) => a !== undefined)) {
    throw new Error('a chat request carried a key: ' + JSON.stringify(auths));
  }
  const missing = statuses.filter(([, status]) => status === 404);
  if (missing.length) throw new Error('requests of the page got a 404: ' + JSON.stringify(missing));
  if (consoleErrors.length) throw new Error('page errors: ' + consoleErrors.join('; '));
  console.log(`browser: all checks passed (${updates} streamed updates)`);
} catch (e) {
  failed = e;
} finally {
  await context.close();
  fs.rmSync(userDataDir, { recursive: true, force: true });
}
if (failed) {
  console.error('browser test failed:', failed.message);
  process.exit(1);
}
