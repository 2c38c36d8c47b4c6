// A person at a live view link, in a Chromium of the test's own (not the pool's). Env:
// LIVE_URL (a CONTROL link). Waits for the picture, screenshots the viewer page and reads the
// colour at the session page's red block (decoded by another page of this Chromium), then
// clicks the session's button and types into its input through the viewer, then answers a
// confirm() the page opens; last, starts a burst of animation that ends on a blue block and
// reads the block's colour until it is blue (the closing picture of a paced screencast).
import { chromium } from 'playwright-core';

const browser = await chromium.launch({
  executablePath: '/usr/bin/chromium',
  chromiumSandbox: false,
  args: ['--disable-gpu', '--disable-background-networking', '--disable-component-update', '--disable-sync', '--no-first-run'],
});
const page = await browser.newPage({ viewport: { width: 800, height: 520 } });
await page.goto(process.env.LIVE_URL);
await page.waitForFunction(() => Number(document.body.dataset.frames || 0) >= 1, null, { timeout: 20000 });
await page.waitForTimeout(300);
const mode = await page.evaluate(() => document.body.dataset.mode);
const rect = await page.evaluate(() => {
  const r = document.getElementById('screen').getBoundingClientRect();
  return { x: r.x, y: r.y, w: r.width, h: r.height };
});
// Where a point of the session's 1280x720 page is in the viewer.
const at = (x, y) => ({ x: rect.x + (rect.w * x) / 1280, y: rect.y + (rect.h * y) / 720 });

const probe = await browser.newPage();
// The colour the viewer shows at a point of the session's page.
const pixel = async (x, y) => {
  const png = await page.screenshot();
  const p = at(x, y);
  return probe.evaluate(async ({ b64, x, y }) => {
    const img = new Image();
    img.src = 'data:image/png;base64,' + b64;
    await img.decode();
    const c = document.createElement('canvas');
    c.width = img.width;
    c.height = img.height;
    const g = c.getContext('2d');
    g.drawImage(img, 0, 0);
    return Array.from(g.getImageData(Math.round(x), Math.round(y), 1, 1).data.slice(0, 3));
  }, { b64: png.toString('base64'), x: p.x, y: p.y });
};
const rgb = await pixel(200, 150);

const button = at(600, 100);
await page.mouse.click(button.x, button.y);
const input = at(650, 225);
await page.mouse.click(input.x, input.y);
await page.keyboard.type('hi there');
await page.keyboard.press('Backspace');
await page.waitForTimeout(500);
// A confirm() the session's page opens shows in the viewer, and is accepted from it.
const ask = at(600, 320);
await page.mouse.click(ask.x, ask.y);
await page.waitForFunction(() => document.body.dataset.dialog === 'confirm', null, { timeout: 10000 });
const dialogText = await page.textContent('#dialog-text');
await page.click('#dialog-accept');
await page.waitForFunction(() => document.body.dataset.dialog === '', null, { timeout: 10000 });
await page.waitForFunction(() => Number(document.body.dataset.tabs || 0) >= 1, null, { timeout: 10000 });
const burst = at(1000, 450);
await page.mouse.click(burst.x, burst.y);
// The burst is 40 animation frames (under a second on a quiet host, longer on a busy one); the
// viewer is read until it shows blue or 15 s have passed, and the last colour read is reported.
const burstAt = Date.now();
let settled = await pixel(200, 150);
while (!(settled[0] < 60 && settled[1] < 60 && settled[2] > 200) && Date.now() - burstAt < 15000) {
  await page.waitForTimeout(250);
  settled = await pixel(200, 150);
}
const settledMs = Date.now() - burstAt;
const frames = await page.evaluate(() => Number(document.body.dataset.frames));
console.log(JSON.stringify({ mode, rgb, settled, settledMs, frames, dialogText, viewer: rect }));
await browser.close();
