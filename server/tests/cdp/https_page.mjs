// Loads an https page whose certificate the browser does not trust, as a client that chooses
// to accept it for its own page would: Security.setIgnoreCertificateErrors on the page's own
// CDP session (the pool refuses it at the browser level). Env: CDP_URL (with its ticket), SITE
// (the https URL). Prints the page's title and the length of its text.
import puppeteer from 'puppeteer-core';

const browser = await puppeteer.connect({ browserWSEndpoint: process.env.CDP_URL });
const [page] = await browser.pages();
const cdp = await page.createCDPSession();
await cdp.send('Security.setIgnoreCertificateErrors', { ignore: true });
const response = await page.goto(process.env.SITE);
const title = await page.title();
const length = await page.evaluate(() => document.body.innerText.length);
console.log(JSON.stringify({ status: response.status(), title, length }));
await browser.disconnect();
