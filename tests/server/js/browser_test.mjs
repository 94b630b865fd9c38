// Loads the chat page of `k3 serve` in Debian's headless Chromium (driven by playwright-core),
// sends two messages and checks that the replies stream in (text grows over several updates) and
// that the second request carries the whole conversation.  Usage: node browser_test.mjs BASE_URL
// Prints "browser: all checks passed".
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { chromium } from 'playwright-core';

const base = process.argv[2];
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
  page.on('request', (r) => { if (r.url().endsWith('/v1/chat/completions')) bodies.push(JSON.parse(r.postData())); });
  const consoleErrors = [];
  page.on('pageerror', (e) => consoleErrors.push(String(e)));
  await page.goto(base + '/');
  await page.waitForFunction(() => document.getElementById('model').textContent.startsWith('m '), null, { timeout: 30000 });
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
