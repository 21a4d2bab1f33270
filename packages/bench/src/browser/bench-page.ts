// A browser suite's page: headless Chromium (Debian's, through @cairn/browser-testing), the entry
// bundled and served from 127.0.0.1, and the tab opened on it; everything closed afterwards.
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

/** Chromium's version from a page's user agent. */
export function chromiumVersion(userAgent: string): string {
  return /Chrom(?:e|ium)\/([\d.]+)/.exec(userAgent)?.[1] ?? userAgent;
}
