// Draws docs/ui.png: the `cairn ui` page over a run, in headless Chromium, with a step's statistics
// and the diff of its last two steps open.
//   pnpm demo --path /tmp/demo --interval 10 --keep 30
//   node --import tsx --conditions=@cairn/source packages/cli/page/screenshot.ts /tmp/demo docs/ui.png
import { launchChromium } from "@cairn/browser-testing";
import { openLocation } from "../src/location.js";
import { RunView } from "../src/ui/run-view.js";
import { startUiServer } from "../src/ui/ui-server.js";

const [root, out] = process.argv.slice(2);
if (!root || !out) throw new Error("usage: screenshot.ts <root> <out.png>");
const location = await openLocation(root);
const view = new RunView([location], { refreshMs: 60_000 });
const steps = (await view.steps()).steps.filter((s) => s.state === "committed").map((s) => s.step);
const [a, b] = steps.slice(-2);
const server = await startUiServer(view);
const session = await launchChromium();
try {
  const page = await session.newPage();
  await page.setViewportSize({ width: 1280, height: 1400 });
  await page.goto(`${server.url}#step=${b}&a=${a}&b=${b}`);
  await page.waitForSelector("#entries tbody tr");
  await page.click("#step p button");
  await page.waitForFunction(
    () =>
      document.querySelectorAll("#entries .histogram").length > 0 && !document.body.textContent?.includes("reading…"),
  );
  await page.click("#diff-controls button");
  await page.waitForSelector("#diff-entries");
  await page.evaluate(() => window.scrollTo(0, 0));
  await page.screenshot({ path: out });
} finally {
  await session.close();
  await server.close();
  await location.close();
}
