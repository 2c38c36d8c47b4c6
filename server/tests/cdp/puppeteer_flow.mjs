// The workflow a CI suite runs, through browserpool's cdp_url with Puppeteer:
// open a page, type, click, read the heading, take a PNG screenshot, disconnect.
// Env: CDP_URL (ws://.../cdp/<session>?ticket=... or without the ticket plus TOKEN), SITE.
// Prints one JSON line with what it saw.
import puppeteer from 'puppeteer-core';

const headers = process.env.TOKEN ? { Authorization: `Bearer ${process.env.TOKEN}` } : undefined;
const browser = await puppeteer.connect({ browserWSEndpoint: process.env.CDP_URL, headers, defaultViewport: null });
const page = await browser.newPage();
await page.goto(`${process.env.SITE}/`, { waitUntil: 'load' });
await page.type('#name', 'puppeteer');
await page.click('#go');
const heading = await page.$eval('#greeting', (el) => el.textContent);
const png = await page.screenshot({ type: 'png' });
console.log(JSON.stringify({ heading, url: page.url(), png: png.length, pngSignature: Buffer.from(png).subarray(1, 4).toString() }));
await browser.disconnect();
