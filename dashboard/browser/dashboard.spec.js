// Drives the precog dashboard in headless Chromium (Debian's chromium,
// through playwright-core). Run by browser_test.go, which serves the
// dashboard over a real ledger, advances a run while this script watches,
// and checks the ledger after Cancel. Env: BASE_URL, TOKEN, RUNNING,
// FINISHED, CANCEL_RUN, SHARDS, ART_DIR, CHROMIUM.
'use strict';
const { chromium } = require('playwright-core');
const path = require('path');

const env = (k) => { const v = process.env[k]; if (!v) throw new Error('missing env ' + k); return v; };
const base = env('BASE_URL'), art = env('ART_DIR');
const steps = [];
function check(cond, what) {
  if (!cond) throw new Error('check failed: ' + what);
  steps.push('ok: ' + what);
}

(async () => {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    headless: true,
    args: ['--no-sandbox', '--disable-dev-shm-usage'],
  });
  const errors = [];
  let expected401 = false;
  try {
    const ctx = await browser.newContext({ viewport: { width: 1280, height: 900 }, timezoneId: 'America/New_York' });
    const page = await ctx.newPage();
    page.on('pageerror', (e) => errors.push('pageerror: ' + e.message));
    page.on('console', (m) => {
      if (m.type() !== 'error') return;
      // The refused login answers 401, which Chromium logs as a failed load.
      if (expected401 && /401/.test(m.text())) return;
      errors.push('console: ' + m.text());
    });

    // Login is required, and a wrong token is refused.
    await page.goto(base + '/');
    check(new URL(page.url()).pathname === '/login', 'the runs page redirects to the login');
    expected401 = true;
    await page.getByLabel('API token').fill('wrong-token');
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.waitForLoadState();
    check(new URL(page.url()).pathname === '/login', 'a wrong token stays on the login');
    check(await page.getByRole('alert').textContent().then((t) => /not valid/.test(t)), 'a wrong token is refused with a message');
    expected401 = false;
    await page.getByLabel('API token').fill(env('TOKEN'));
    await page.getByRole('button', { name: 'Log in' }).click();
    await page.waitForURL(base + '/');

    // The runs page lists a finished and a running run; the running one's
    // progress advances without a reload.
    const running = page.locator(`tr[data-run="${env('RUNNING')}"]`);
    const finished = page.locator(`tr[data-run="${env('FINISHED')}"]`);
    check(await running.count() === 1 && await finished.count() === 1, 'the runs page lists the running and the finished run');
    check(/running/.test(await running.locator('.state').textContent()), 'the running run says running in text');
    check(/succeeded/.test(await finished.locator('.state').textContent()), 'the finished run says succeeded in text');
    const t0 = await running.locator('time').first();
    check((await t0.getAttribute('title')).endsWith('UTC') && !(await t0.textContent()).endsWith(' UTC'), 'times are local with UTC on hover');
    const before = await running.locator('.rows').textContent();
    await page.evaluate(() => { window.__noReload = true; });
    // Poll from here: waitForFunction evaluates a string, which the
    // dashboard's CSP (script-src 'self') rightly refuses.
    const deadline = Date.now() + 15000;
    while ((await running.locator('.rows').textContent()) === before) {
      if (Date.now() > deadline) throw new Error('the running run did not advance within 15s: ' + before);
      await page.waitForTimeout(200);
    }
    const after = await page.locator(`tr[data-run="${env('RUNNING')}"] .rows`).textContent();
    check(await page.evaluate(() => window.__noReload === true), `progress advanced without a reload (${before.trim()} → ${after.trim()})`);
    await page.screenshot({ path: path.join(art, 'runs.png'), fullPage: true });

    // Keyboard: the first Tab reaches the skip link, then the navigation.
    await page.keyboard.press('Tab');
    check(await page.evaluate(() => document.activeElement.textContent.trim()) === 'Skip to content', 'Tab reaches the skip link');

    // A phone-width view of the runs page.
    await page.setViewportSize({ width: 390, height: 844 });
    await page.screenshot({ path: path.join(art, 'runs-phone.png'), fullPage: true });
    await page.setViewportSize({ width: 1280, height: 900 });

    // The run page has one data-shard element per shard.
    await page.goto(base + '/runs/' + env('RUNNING'));
    const n = await page.locator('[data-shard]').count();
    check(n === Number(env('SHARDS')), `the run page has ${n} data-shard elements (want ${env('SHARDS')})`);
    check(await page.locator('svg.timeline [data-bar-shard]').count() > 0, 'the shard timeline draws bars');
    await page.screenshot({ path: path.join(art, 'run.png'), fullPage: true });

    await page.goto(base + '/jobs');
    check(await page.locator('tr[data-job]').count() > 0, 'the jobs page lists a job');
    await page.screenshot({ path: path.join(art, 'jobs.png'), fullPage: true });

    // The backfill page: one cell per date, coloured by its run's state,
    // each a link to that run.
    await page.goto(base + '/backfills/' + env('BACKFILL'));
    const dates = env('BACKFILL_DATES').split(',');
    const cells = page.locator('.bf-grid a.bf-cell[data-cell]');
    check(await cells.count() === dates.length, `the backfill page has ${await cells.count()} cells (want ${dates.length})`);
    for (const [i, d] of dates.entries()) {
      const cell = page.locator(`.bf-grid a.bf-cell[data-cell="${d}"]`);
      check(await cell.count() === 1, `a cell for ${d}`);
      const want = env('BACKFILL_STATES').split(',')[i];
      check(await cell.getAttribute('data-state') === want, `cell ${d} is ${await cell.getAttribute('data-state')} (want ${want})`);
    }
    const first = page.locator(`.bf-grid a.bf-cell[data-cell="${dates[0]}"]`);
    const bg = await first.evaluate((el) => getComputedStyle(el).backgroundColor);
    const bg2 = await page.locator(`.bf-grid a.bf-cell[data-cell="${dates[1]}"]`).evaluate((el) => getComputedStyle(el).backgroundColor);
    check(bg !== bg2, `cells of different states have different colours (${bg} vs ${bg2})`);
    await page.screenshot({ path: path.join(art, 'backfill.png'), fullPage: true });
    await first.click();
    await page.waitForURL(new RegExp('/runs/' + env('BACKFILL_RUN') + '$'));
    check(/Run/.test(await page.locator('h1').textContent()), 'a cell links to its run');

    // Cancel, clicked, cancels the run (browser_test.go checks the ledger).
    await page.goto(base + '/runs/' + env('CANCEL_RUN'));
    await page.getByRole('button', { name: 'Cancel', exact: true }).click();
    await page.waitForURL(/note=/);
    check(/cancelled/.test(await page.getByRole('status').textContent()), 'Cancel reports the run cancelled');
    check(await page.getByRole('button', { name: 'Cancel', exact: true }).count() === 0, 'a cancelled run offers no Cancel');
    await page.screenshot({ path: path.join(art, 'run-cancelled.png'), fullPage: true });

    check(errors.length === 0, 'no console errors: ' + errors.join('; '));
  } catch (e) {
    console.log(JSON.stringify({ ok: false, error: String(e && e.stack || e), steps, errors }));
    await browser.close();
    process.exit(1);
  }
  await browser.close();
  console.log(JSON.stringify({ ok: true, steps, errors }));
})();
