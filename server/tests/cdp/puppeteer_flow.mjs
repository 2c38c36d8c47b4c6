// The workflow a CI suite runs, through browserpool's cdp_url with Puppeteer:
// open a page, type, click, read the heading, take a PNG screenshot, disconnect.
// Env: CDP_URL (ws://.../cdp/<session>?ticket=... or without the ticket plus TOKEN), SITE.
// Prints one JSON line with what it saw, and how long each step took (ms).
import puppeteer from 'puppeteer-core';

const steps = {};
let last = performance.now();
const step = (name) => {
  const now = performance.now();
  steps[name] = Math.round(now - last);
  last = now;
};
const headers = process.env.TOKEN ? { Authorization: `Bearer ${process.env.TOKEN}` } : undefined;
const browser = await puppeteer.connect({ browserWSEndpoint: process.env.CDP_URL, headers, defaultViewport: null });
step('connect');
const page = await browser.newPage();
step('newPage');
await page.goto(`${process.env.SITE}/`, { waitUntil: 'load' });
step('goto');
await page.type('#name', 'puppeteer');
await page.click('#go');
const heading = await page.$eval('#greeting', (el) => el.textContent);
step('typeClickRead');
const png = await page.screenshot({ type: 'png' });
step('screenshot');
console.log(JSON.stringify({ heading, url: page.url(), png: png.length, pngSignature: Buffer.from(png).subarray(1, 4).toString(), steps }));
await browser.disconnect();
