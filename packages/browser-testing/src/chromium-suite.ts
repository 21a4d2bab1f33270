// One Chromium per test file, launched by the first test that needs it and closed after the file.
import { afterAll } from "vitest";
import { type ChromiumLaunchOptions, type ChromiumSession, launchChromium, requireChromium } from "./chromium.js";

export interface ChromiumSuite {
  /** The file's browser: skips the calling test (or fails it under CI) when Chromium is missing. */
  session(skip: (condition: boolean, note?: string) => void): Promise<ChromiumSession>;
}

/** Call at the top of a test file (or describe block); the browser is closed in its afterAll. */
export function chromiumSuite(options: ChromiumLaunchOptions = {}): ChromiumSuite {
  let launched: Promise<ChromiumSession> | undefined;
  afterAll(async () => {
    if (launched) await (await launched.catch(() => undefined))?.close();
  });
  return {
    session(skip) {
      const executablePath = requireChromium(skip);
      launched ??= launchChromium({ executablePath, ...options });
      return launched;
    },
  };
}
