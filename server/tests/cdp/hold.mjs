// Attaches Playwright over CDP (which auto-attaches to every new target and asks it to wait
// for the debugger) and holds the connection until stdin closes, printing "ready" once
// attached. Env: CDP_URL.
import { chromium } from 'playwright-core';

const browser = await chromium.connectOverCDP(process.env.CDP_URL);
console.log(JSON.stringify({ ready: true, pages: browser.contexts()[0].pages().length }));
process.stdin.resume();
await new Promise((done) => process.stdin.on('end', done));
await browser.close();
