// A page Playwright opens over connectOverCDP in an emulated session: what it sees. Env:
// CDP_URL (with its ticket), SITE.
import { chromium } from 'playwright-core';

const browser = await chromium.connectOverCDP(process.env.CDP_URL);
const context = browser.contexts()[0];
const page = await context.newPage();
await page.goto(`${process.env.SITE}/seen`);
const seen = await page.evaluate(() => window.seen);
const headers = await page.evaluate(() => window.headers);
console.log(JSON.stringify({ seen, headers }));
await browser.close();
