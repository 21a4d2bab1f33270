// A browser suite's page: headless Chromium (Debian's, through @cairn/browser-testing), the entry
// bundled and served from 127.0.0.1, and the tab opened on it; everything closed afterwards.
import { readFileSync, readdirSync } from "node:fs";
import {
  CHROMIUM_INSTALL_COMMAND,
  type ChromiumLaunchOptions,
  type TestPage,
  chromiumPath,
  launchChromium,
  openTestPage,
  serveTestPage,
} from "@cairn/browser-testing";

export async function withBenchPage<T>(
  suite: string,
  entry: string,
  launch: ChromiumLaunchOptions,
  fn: (page: TestPage) => Promise<T>,
): Promise<T> {
  if (chromiumPath() === undefined) throw new Error(`the ${suite} suite runs in Chromium: ${CHROMIUM_INSTALL_COMMAND}`);
  const session = await launchChromium(launch);
  try {
    const served = await serveTestPage({ entry });
    try {
      const page = await openTestPage(session, served.url, { timeoutMs: 120_000 });
      const result = await fn(page);
      await page.close();
      return result;
    } finally {
      await served.close();
    }
  } finally {
    await session.close();
  }
}

/**
 * CPU seconds (user + system) used so far by every process descending from this one: the
 * browser's, when a suite launched it. Read from /proc (Linux); a busy machine does not skew it.
 */
export function descendantCpuSeconds(): number {
  const procs = new Map<number, { parent: number; seconds: number }>();
  const tick = 100; // USER_HZ, 100 on every Linux this runs on
  for (const entry of readdirSync("/proc")) {
    if (!/^\d+$/.test(entry)) continue;
    try {
      const stat = readFileSync(`/proc/${entry}/stat`, "utf8");
      // Fields after the command's closing parenthesis: state, ppid, ..., utime (14th), stime (15th).
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      procs.set(Number(entry), {
        parent: Number(fields[1]),
        seconds: (Number(fields[11]) + Number(fields[12])) / tick,
      });
    } catch {
      // Gone meanwhile.
    }
  }
  let total = 0;
  for (const [pid, { seconds }] of procs) {
    let up = procs.get(pid)?.parent;
    for (let depth = 0; up !== undefined && up > 1 && up !== process.pid && depth < 32; depth++)
      up = procs.get(up)?.parent;
    if (up === process.pid) total += seconds;
  }
  return total;
}

/** Seconds the page's main thread has been busy so far (Chromium's TaskDuration, in thread time). */
export async function pageThreadSeconds(page: TestPage): Promise<number> {
  let cdp = cdpSessions.get(page);
  if (!cdp) {
    cdp = page.page
      .context()
      .newCDPSession(page.page)
      .then(async (session) => {
        await session.send("Performance.enable", { timeDomain: "threadTicks" });
        return session;
      });
    cdpSessions.set(page, cdp);
  }
  const { metrics } = await (await cdp).send("Performance.getMetrics");
  return metrics.find((m) => m.name === "TaskDuration")?.value ?? Number.NaN;
}

type CdpSession = Awaited<ReturnType<ReturnType<TestPage["page"]["context"]>["newCDPSession"]>>;
const cdpSessions = new WeakMap<TestPage, Promise<CdpSession>>();

/** Chromium's version from a page's user agent. */
export function chromiumVersion(userAgent: string): string {
  return /Chrom(?:e|ium)\/([\d.]+)/.exec(userAgent)?.[1] ?? userAgent;
}
