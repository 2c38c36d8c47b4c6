// A hostile CDP client: every way it tries to reach past its session. Env: CDP_URL, SITE
// (a loopback fixture the tenant's policy refuses). Prints one JSON line of outcomes.
import puppeteer from 'puppeteer-core';

const out = {};
const attempt = async (name, f) => {
  try {
    await f();
    out[name] = 'ok';
  } catch (e) {
    out[name] = `error: ${e.message}`;
  }
};
const browser = await puppeteer.connect({ browserWSEndpoint: process.env.CDP_URL, defaultViewport: null });
const page = await browser.newPage();
const cdp = await page.createCDPSession();
await attempt('goto', () => page.goto(`${process.env.SITE}/`, { timeout: 5000 }));
// Its own interception off, then the same page again.
await attempt('fetchDisable', () => cdp.send('Fetch.disable'));
await attempt('gotoAfterFetchDisable', () => page.goto(`${process.env.SITE}/pixel`, { timeout: 5000 }));
await attempt('fetchFromPage', () => page.evaluate((u) => fetch(u).then((r) => r.status), `${process.env.SITE}/pixel`));
const browserCdp = await browser.target().createCDPSession();
await attempt('createTarget', () => browserCdp.send('Target.createTarget', { url: `${process.env.SITE}/` }));
await attempt('proxyContext', () => browserCdp.send('Target.createBrowserContext', { proxyServer: 'http://127.0.0.1:1' }));
await attempt('fileInput', () => cdp.send('DOM.setFileInputFiles', { files: ['/etc/passwd'], backendNodeId: 1 }));
await attempt('navigateFile', () => cdp.send('Page.navigate', { url: 'file:///etc/passwd' }));
await attempt('browserClose', () => browserCdp.send('Browser.close'));
await attempt('stillThere', () => page.evaluate(() => 1 + 1));
console.log(JSON.stringify(out));
await browser.disconnect();
