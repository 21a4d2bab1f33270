// `cairn ui` in headless Chromium (Debian's, through @cairn/browser-testing): the page over a
// tiered, incremental run written by a real manager, as a person would use it.
import { join } from "node:path";
import { chromiumSuite } from "@cairn/browser-testing";
import { CheckpointManager } from "@cairn/manager";
import { describe, expect, it } from "vitest";
import { openLocation } from "../src/location.js";
import { RunView } from "../src/ui/run-view.js";
import { startUiServer } from "../src/ui/ui-server.js";
import { HOSTILE_KEYS, HOSTILE_METRIC, damage, loss, runState, stepsOnDisk, writeUiRun } from "./ui-run.js";

const chromium = chromiumSuite();

async function serve(tiers: readonly string[]) {
  const locations = await Promise.all(tiers.map((t) => openLocation(t)));
  const server = await startUiServer(new RunView(locations, { refreshMs: 250 }));
  return {
    url: server.url,
    close: async () => {
      await server.close();
      await Promise.all(locations.map((l) => l.close()));
    },
  };
}

/** The texts of the elements a selector finds. */
async function texts(
  page: Awaited<ReturnType<Awaited<ReturnType<typeof chromium.session>>["newPage"]>>,
  selector: string,
) {
  return page.locator(selector).allTextContents();
}

describe("cairn ui in Chromium", () => {
  it("shows the run: step rows, curves with a point per step, entries with HTML keys as text, a NaN tensor flagged, a diff, verify of a damaged step", async ({
    skip,
  }) => {
    const session = await chromium.session(skip);
    const { tiers } = await writeUiRun();
    const damagedFile = await damage(tiers[0], 50, "w");
    const { url, close } = await serve(tiers);
    const page = await session.newPage();
    const problems: string[] = [];
    page.on("pageerror", (error) => problems.push(error.message));
    page.on("console", (message) => message.type() === "error" && problems.push(message.text()));
    try {
      await page.goto(url);
      // Step rows: every step directory on either tier, newest first, its state per tier.
      const rows = page.locator("table#steps tbody tr");
      await expect.poll(() => rows.count()).toBe(5);
      const onDisk = await Promise.all(tiers.map(stepsOnDisk));
      const expected = [...new Set(onDisk.flatMap((s) => [...s.keys()]))].sort((a, b) => a - b);
      expect(await rows.evaluateAll((trs) => trs.map((tr) => Number(tr.getAttribute("data-step"))))).toEqual(
        expected.toReversed(),
      );
      for (const step of expected) {
        const cells = await texts(page, `tr[data-step="${step}"] td.state`);
        expect(cells).toEqual(onDisk.map((s) => s.get(step) ?? "–"));
      }
      const committed = expected.filter((step) => onDisk.some((s) => s.get(step) === "committed"));
      // Curves: one point per committed step for each metric (the HTML-named one as its title, as text).
      await expect
        .poll(() => page.getAttribute('[data-chart="metric:loss"]', "data-points"))
        .toBe(String(committed.length));
      expect(await page.getAttribute(`[data-chart="metric:${HOSTILE_METRIC}"]`, "data-points")).toBe(
        String(committed.length),
      );
      expect(await page.locator('[data-chart="metric:loss"] canvas').count()).toBe(1);
      expect(await texts(page, "table#steps thead th.metric")).toEqual([HOSTILE_METRIC, "loss"].sort());
      expect(await page.locator('tr[data-step="60"] td.num').allTextContents()).toContain(
        String(Number(loss(60).toPrecision(6))),
      );

      // A step's entries: keys holding HTML are text, and nothing they hold ran.
      await page.click('tr[data-step="60"] td.step');
      await page.waitForSelector("#entries tbody tr");
      const keys = await texts(page, "#entries td.key");
      expect(keys).toContain(HOSTILE_KEYS[0]);
      expect(keys).toContain(`${HOSTILE_KEYS[1]}.lr`);
      expect(await page.evaluate(() => (window as unknown as { pwned?: string }).pwned)).toBeUndefined();
      expect(await page.locator("#entries script, #entries img").count()).toBe(0);
      // Statistics on demand: the NaN tensor is flagged, the others are not.
      await page.click('#entries tr[data-key="nonfinite"] button');
      await page.click('#entries tr[data-key="w"] button');
      await page.waitForSelector('#entries tr[data-key="nonfinite"].nonfinite .flag.nan');
      await page.waitForSelector('#entries tr[data-key="w"] .histogram');
      expect(await page.textContent('#entries tr[data-key="nonfinite"] .flag.nan')).toBe("NaN ×1");
      expect(await page.getAttribute('#entries tr[data-key="w"]', "class")).toBeNull();
      expect(await page.locator('#entries tr[data-key="w"] .histogram rect').count()).toBe(16);

      // A diff of two steps lists exactly the tensors that changed between them.
      await page.check('tr[data-step="40"] input[name="diff-a"]');
      await page.check('tr[data-step="60"] input[name="diff-b"]');
      await page.click("#diff-controls button");
      await page.waitForSelector("#diff-entries");
      expect(
        await page.locator("#diff-entries tbody tr").evaluateAll((trs) => trs.map((tr) => tr.getAttribute("data-key"))),
      ).toEqual(["w", "half"]);
      expect(await page.getAttribute("#diff", "data-a")).toBe("40");

      // Verify of the damaged step names the damaged file; a good step verifies and becomes the newest verified.
      await page.click('tr[data-step="50"] td.step');
      await page.waitForSelector('#step[data-step="50"] #verify button');
      await page.click("#verify button");
      await page.waitForSelector(".verify-damaged");
      expect(
        await page.locator(".damage li").evaluateAll((lis) => lis.map((li) => li.getAttribute("data-file"))),
      ).toContain(damagedFile);
      await expect.poll(() => page.textContent('tr[data-step="50"] td.verified')).toContain("✗");
      await page.click('tr[data-step="60"] td.step');
      await page.waitForSelector('#step[data-step="60"] #verify button');
      await page.click("#verify button");
      await page.waitForSelector(".verify-ok");
      await expect.poll(() => page.locator("tr.newest-verified").getAttribute("data-step")).toBe("60");
      expect(problems).toEqual([]);
    } finally {
      await page.close();
      await close();
    }
  });

  it("refreshes as the run goes on: a step committed while the page is open appears, its curve point too", async ({
    skip,
  }) => {
    const session = await chromium.session(skip);
    const { tiers } = await writeUiRun();
    const { url, close } = await serve(tiers);
    const page = await session.newPage();
    try {
      await page.goto(url);
      await page.waitForSelector('tr[data-step="60"]');
      const before = Number(await page.getAttribute('[data-chart="metric:loss"]', "data-points"));
      const manager = new CheckpointManager([...tiers], 10, {
        incremental: true,
        maxToKeep: 3,
        tiers: [undefined, { every: 20 }],
        checkpointOnPreemption: false,
      });
      await manager.save(70, runState(70), { metrics: { loss: loss(70) } });
      await manager.close();
      await page.waitForSelector('tr[data-step="70"]');
      await expect
        .poll(async () => Number(await page.getAttribute('[data-chart="metric:loss"]', "data-points")))
        .toBeGreaterThan(before);
      expect(await page.locator('tr[data-step="70"] td.state').first().textContent()).toBe("committed");
      expect(join(tiers[0], "70")).toBeTruthy();
    } finally {
      await page.close();
      await close();
    }
  });
});
