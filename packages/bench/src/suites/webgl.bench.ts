// Issue 38's device figures: on tfjs's webgl backend in headless Chromium (SwiftShader's WebGL2,
// every tensor in a GPU texture), how long saveAsync holds the training loop against a
// synchronous save, with copy and with reference staging, and how long a training step takes
// with a save in flight against an idle one. Timed in the page (examples/src/browser/device-bench-page.ts).
import { fileURLToPath } from "node:url";
import { chromiumVersion, withBenchPage } from "../browser/bench-page.js";
import { report } from "../report.js";
import { MiB, median, quick, range, rounds } from "../support.js";

const suite = "webgl";
const ROUNDS = rounds(5);
// A model of 256 inputs and two hidden layers of 1024 (1.3 M weights; with Adam's slots 15 MiB of state).
const SHAPE = quick ? { inputs: 64, hidden: [256, 256] } : { inputs: 256, hidden: [1024, 1024] };
const PAGE = fileURLToPath(new URL("../../../../examples/src/browser/device-bench-page.ts", import.meta.url));

await withBenchPage("webgl", PAGE, { gpu: "swiftshader" }, async (page) => {
  const { backend, userAgent } = await page.call<{ backend: string; userAgent: string }>("setUp", "webgl");
  if (backend !== "webgl") throw new Error(`tfjs fell back to ${backend}: these figures need its webgl backend`);
  const chromium = chromiumVersion(userAgent);
  await page.call("clear");

  const held = await page.call<{ bytes: number; sync: number[]; copy: number[]; reference: number[] }>("blocking", {
    shape: SHAPE,
    rounds: ROUNDS,
  });
  const label = `${(held.bytes / MiB).toFixed(1)} MiB of state on webgl`;
  const seconds = (xs: number[]): number[] => xs.map((x) => +x.toFixed(4));
  const sync = median(held.sync);
  for (const staging of ["copy", "reference"] as const) {
    report({
      suite,
      name: `saveAsync blocking the loop, ${staging} staging, ${label}`,
      value: median(held[staging]),
      unit: "s",
      baseline: { name: "synchronous save to opfs:// (manager.save), in turns", value: sync },
      ratio: median(held[staging]) / sync,
      better: "lower",
      extra: {
        rounds: ROUNDS,
        chromium,
        seconds: seconds(held[staging]),
        syncSeconds: seconds(held.sync),
        range: range(held[staging]),
      },
    });
  }

  for (const staging of ["copy", "reference"] as const) {
    const steps = await page.call<{ idle: number[]; inFlight: number[]; saves: number }>("stepTimes", {
      shape: SHAPE,
      staging,
      // A save every 20 steps: a reference save stays in flight for several, and idle steps come between saves.
      steps: quick ? 20 : 100,
      every: quick ? 10 : 20,
    });
    if (steps.inFlight.length === 0) throw new Error(`no step ran with a ${staging} save in flight`);
    report({
      suite,
      name: `training step with a saveAsync in flight, ${staging} staging, ${label}`,
      value: median(steps.inFlight),
      unit: "s",
      baseline: { name: "an idle step of the same run", value: median(steps.idle) },
      ratio: median(steps.inFlight) / median(steps.idle),
      better: "lower",
      extra: {
        saves: steps.saves,
        stepsInFlight: steps.inFlight.length,
        stepsPerSaveInFlight: +(steps.inFlight.length / steps.saves).toFixed(1),
        idleSteps: steps.idle.length,
        inFlightRange: range(steps.inFlight),
        idleRange: range(steps.idle),
      },
    });
  }
  await page.call("clear");
});
