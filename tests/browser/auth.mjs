// The dashboard's secret exchange in Debian's Chromium (playwright-core, no browser download).
// Usage: node auth.mjs URL_WITH_TOKEN SCREENSHOT_PATH
// Prints one JSON line of facts; exits non-zero when an expectation fails.
import { chromium } from "playwright-core";

const [url, shot] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic"],
});
const facts = {};
try {
  const context = await browser.newContext({ viewport: { width: 1280, height: 700 } });
  const page = await context.newPage();
  page.setDefaultTimeout(20000);
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective));
  });
  await page.goto(url);
  await page.waitForSelector(".memory-row");
  facts.final_url = page.url();
  facts.first_row = await page.textContent(".memory-row td:last-child");
  facts.document_cookie = await page.evaluate(() => document.cookie);
  facts.api_status = await page.evaluate(async () => (await fetch("/api/status")).status);
  const cookies = await context.cookies();
  const c = cookies.find((x) => x.name.startsWith("slm_session_"));
  if (!c) fail("no session cookie: " + JSON.stringify(cookies));
  facts.cookie_http_only = c.httpOnly;
  facts.cookie_same_site = c.sameSite;
  facts.csp_violations = (await page.evaluate(() => window.__csp)).length;
  await page.screenshot({ path: shot, fullPage: true });

  // Another browser profile, without the cookie: the bare page is refused.
  const other = await browser.newContext();
  const p2 = await other.newPage();
  const r = await p2.goto(facts.final_url);
  facts.without_cookie_status = r.status();
} catch (e) {
  await browser.close();
  fail(e.message);
}
await browser.close();
console.log(JSON.stringify(facts));
