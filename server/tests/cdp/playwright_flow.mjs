// The same workflow with Playwright's connectOverCDP. Env: CDP_URL, optional TOKEN, SITE.
import { chromium } from 'playwright-core';

const headers = process.env.TOKEN ? { Authorization: `Bearer ${process.env.TOKEN}` } : undefined;
const browser = await chromium.connectOverCDP(process.env.CDP_URL, { headers });
const context = browser.contexts()[0];
const page = await context.newPage();
await page.goto(`${process.env.SITE}/`);
await page.fill('#name', 'playwright');
await page.click('#go');
const heading = await page.textContent('#greeting');
const png = await page.screenshot({ type: 'png' });
console.log(JSON.stringify({ heading, url: page.url(), png: png.length, pngSignature: png.subarray(1, 4).toString() }));
// Closing a connectOverCDP browser only disconnects; the session's browser stays up.
await browser.close();
