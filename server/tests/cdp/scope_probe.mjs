// What a Puppeteer client of a context-isolated session can see of the shared browser: the
// pages and targets it lists, and whether it can create a context of its own.
// Env: CDP_URL. Prints one JSON line.
import puppeteer from 'puppeteer-core';

const browser = await puppeteer.connect({ browserWSEndpoint: process.env.CDP_URL, defaultViewport: null });
const pages = await browser.pages();
const targets = browser.targets().map((t) => `${t.type()} ${t.url()}`);
let newContext;
try {
  await browser.createBrowserContext();
  newContext = 'created';
} catch (e) {
  newContext = String(e.message);
}
const page = await browser.newPage();
await page.goto(`${process.env.SITE}/second`, { waitUntil: 'load' });
const cookie = await page.evaluate(() => document.cookie);
console.log(JSON.stringify({ pages: pages.map((p) => p.url()), targets, newContext, cookie, after: (await browser.pages()).map((p) => p.url()) }));
await browser.disconnect();
