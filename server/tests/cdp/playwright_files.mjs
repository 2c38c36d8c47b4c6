// Files through Playwright's connectOverCDP. Env: CDP_URL, TOKEN. A page's download (its
// suggested name, whether Playwright calls it failed), and setInputFiles with a buffer: what the
// page reads of the file.
import { chromium } from 'playwright-core';

const headers = { Authorization: `Bearer ${process.env.TOKEN}` };
const browser = await chromium.connectOverCDP(process.env.CDP_URL, { headers });
const context = browser.contexts()[0];
const page = await context.newPage();
await page.setContent(`<a id="d" href="data:text/csv,a%2Cb%0A1%2C2" download="report.csv">get</a>
<input type="file" id="f"><pre id="out"></pre>
<script>document.getElementById('f').onchange = async (e) => {
  const f = e.target.files[0];
  document.getElementById('out').textContent = f.name + ':' + await f.text();
};</script>`);
const [download] = await Promise.all([page.waitForEvent('download'), page.click('#d')]);
const suggested = download.suggestedFilename();
// Settles once Chromium reports the download finished (or failed).
const failure = await download.failure();
await page.setInputFiles('#f', { name: 'note.txt', mimeType: 'text/plain', buffer: Buffer.from('from a buffer') });
await page.waitForFunction(() => document.getElementById('out').textContent !== '');
const read = await page.textContent('#out');
console.log(JSON.stringify({ suggested, failure, read }));
await browser.close();
