// Drives `slm dashboard` in Debian's Chromium (playwright-core, no browser download).
// Usage: node dashboard.mjs URL SCREENSHOT_PATH LIVE_LOOP_NAME
// Prints one JSON line of facts; exits non-zero when an expectation fails.
import { chromium } from "playwright-core";

const [url, shot, liveLoop] = process.argv.slice(2);
const fail = (msg) => { console.error("FAIL: " + msg); process.exit(1); };

const browser = await chromium.launch({
  executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
         "--disable-component-update", "--disable-sync", "--disable-quic"],
});
const facts = {};
try {
  const page = await browser.newPage({ viewport: { width: 1280, height: 1000 } });
  page.setDefaultTimeout(20000);
  await page.addInitScript(() => {
    window.__csp = [];
    document.addEventListener("securitypolicyviolation", (e) => window.__csp.push(e.violatedDirective));
  });
  const response = await page.goto(url);
  facts.csp = response.headers()["content-security-policy"] || "";
  await page.waitForSelector(".memory-row");
  facts.page = await page.evaluate(() => {
    const n = performance.getEntriesByType("navigation")[0];
    const p = Object.fromEntries(performance.getEntriesByType("paint").map((e) => [e.name, Math.round(e.startTime)]));
    return { dom_content_loaded_ms: Math.round(n.domContentLoadedEventEnd), load_ms: Math.round(n.loadEventEnd), ...p };
  });

  // Find a memory by meaning.
  await page.fill("#search-q", "PR 42 approved");
  await page.click("#search-btn");
  await page.waitForFunction(() => document.querySelector(".memory-row td:last-child")?.textContent.includes("PR #42"));
  facts.top_hit = await page.textContent(".memory-row td:last-child");
  facts.top_score = Number(await page.textContent(".memory-row td:nth-child(2)"));

  // Loops page: loop list, a finished run, its laps and chart.
  const t = Date.now();
  await page.click("#tab-loops");
  await page.waitForSelector('.loop-row[data-name="convergence-demo"]');
  facts.loops_ms = Date.now() - t;
  await page.click('.loop-row[data-name="convergence-demo"]');
  await page.waitForSelector(".run-row");
  await page.click(".run-row");
  await page.waitForFunction(() => document.querySelectorAll(".lap-row").length === 3);
  facts.demo_laps = await page.locator(".lap-row").count();
  facts.demo_points = await page.locator("#chart .lap-point").count();
  facts.threshold_line = await page.locator("#threshold-line").count();
  facts.demo_status = await page.textContent("#run-status");
  // No word in the narrow loop column breaks: every name and status is one line box.
  facts.loop_cell_lines = await page.evaluate(() => [...document.querySelectorAll("#loop-list td")].map((td) => {
    const r = document.createRange(); r.selectNodeContents(td);
    return [td.textContent, new Set([...r.getClientRects()].map((x) => Math.round(x.top))).size];
  }));
  for (const [text, lines] of facts.loop_cell_lines) if (lines > 1) fail(`"${text}" wraps over ${lines} lines in the loop list`);

  // A run of two gates shows them, with the memories that passed each.
  await page.click('.loop-row[data-name="pair"]');
  await page.waitForSelector(".run-row");
  await page.click(".run-row");
  await page.waitForSelector(".gate-row");
  facts.gate_rows = await page.$$eval(".gate-row", (rows) => rows.map((r) => [...r.cells].map((c) => c.textContent)));

  // A live run gains a lap while we watch.
  await page.click(`.loop-row[data-name="${liveLoop}"]`);
  await page.waitForFunction((n) => document.querySelector(".run-row td:nth-child(2)")?.textContent === "running", liveLoop);
  await page.click(".run-row");
  await page.waitForSelector(".lap-row");
  facts.live_before = await page.locator(".lap-row").count();
  await page.waitForFunction((n) => document.querySelectorAll(".lap-row").length > n, facts.live_before, { timeout: 15000 });
  facts.live_after = await page.locator(".lap-row").count();
  facts.live_points = await page.locator("#chart .lap-point").count();
  facts.csp_violations = await page.evaluate(() => window.__csp);
  await page.screenshot({ path: shot, fullPage: true });
} catch (e) {
  await browser.close();
  fail(e.message);
}
await browser.close();
console.log(JSON.stringify(facts));
