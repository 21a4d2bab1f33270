// The system Chromium (Debian's `chromium`), found, required by tests and launched through
// playwright-core with the flags a headless browser needs on a machine with no outside network.
import { accessSync, constants } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type BrowserContext, type Page, chromium } from "playwright-core";

/** The command that installs what these tests drive; named by every skip and every CI failure. */
export const CHROMIUM_INSTALL_COMMAND = "apt-get install chromium";

/** Where Debian's package puts the browser; `CHROMIUM_PATH` overrides it. */
export const DEFAULT_CHROMIUM_PATH = "/usr/bin/chromium";

/** True when `CI` is set to anything but "", "0" or "false": then a missing browser fails instead of skipping. */
export function inCI(env: NodeJS.ProcessEnv = process.env): boolean {
  return env.CI !== undefined && !["", "0", "false"].includes(env.CI);
}

/** The Chromium executable to drive (`CHROMIUM_PATH`, else /usr/bin/chromium), or undefined when it is not there. */
export function chromiumPath(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const path = env.CHROMIUM_PATH || DEFAULT_CHROMIUM_PATH;
  try {
    accessSync(path, constants.X_OK);
    return path;
  } catch {
    return undefined;
  }
}

/**
 * The project's rule for a test that needs Chromium, given vitest's `skip` from the test context:
 * without the browser the test is skipped naming the install command, unless CI is set, where it
 * throws. Returns the executable path.
 */
export function requireChromium(skip: (condition: boolean, note?: string) => void, env = process.env): string {
  const path = chromiumPath(env);
  const need = `needs Chromium: \`${CHROMIUM_INSTALL_COMMAND}\` (or set CHROMIUM_PATH)`;
  skip(path === undefined && !inCI(env), need);
  if (path === undefined) throw new Error(`CI=true and this test ${need}; .ci/run installs it`);
  return path;
}

export interface ChromiumLaunchOptions {
  /** The executable; default: `chromiumPath()`, and an error when there is none. */
  readonly executablePath?: string;
  /**
   * "swiftshader": WebGL2 on the CPU through SwiftShader (tfjs's webgl backend runs there);
   * default false: no GPU at all (`--disable-gpu`).
   */
  readonly gpu?: "swiftshader" | false;
  /** More command-line flags, after the harness's own. */
  readonly args?: readonly string[];
  /** Milliseconds allowed for the browser to start (default 60 s: the machine is shared). */
  readonly timeoutMs?: number;
}

/** The command-line flags the harness passes (playwright-core adds its own defaults beside them). */
export function chromiumFlags(gpu: ChromiumLaunchOptions["gpu"] = false): string[] {
  return [
    "--headless",
    "--no-sandbox",
    // The machine reaches no network: nothing may try to (QUIC probes, updates, sync, field trials).
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    ...(gpu === "swiftshader" ? ["--use-angle=swiftshader", "--enable-unsafe-swiftshader"] : ["--disable-gpu"]),
  ];
}

/** One browser with one persistent profile: pages opened in it share OPFS and IndexedDB, across reloads and closes. */
export interface ChromiumSession {
  readonly context: BrowserContext;
  /** The fresh profile directory (`--user-data-dir`), removed by `close()`. */
  readonly userDataDir: string;
  readonly executablePath: string;
  /** A new tab in this profile. */
  newPage(): Promise<Page>;
  /** Closes the browser and removes its profile; safe to call twice. */
  close(): Promise<void>;
}

/**
 * Launches headless Chromium with a fresh profile. Call `requireChromium(skip)` first in a test so
 * that a machine without the browser skips (or, under CI, fails) with the install command.
 */
export async function launchChromium(options: ChromiumLaunchOptions = {}): Promise<ChromiumSession> {
  const executablePath = options.executablePath ?? chromiumPath();
  if (executablePath === undefined) {
    throw new Error(
      `no Chromium at ${process.env.CHROMIUM_PATH || DEFAULT_CHROMIUM_PATH}: \`${CHROMIUM_INSTALL_COMMAND}\``,
    );
  }
  const userDataDir = await mkdtemp(join(tmpdir(), "cairn-chromium-"));
  let context: BrowserContext;
  try {
    context = await chromium.launchPersistentContext(userDataDir, {
      executablePath,
      headless: true,
      args: [...chromiumFlags(options.gpu), ...(options.args ?? [])],
      timeout: options.timeoutMs ?? 60_000,
    });
  } catch (error) {
    await rm(userDataDir, { recursive: true, force: true });
    throw error;
  }
  let closed: Promise<void> | undefined;
  return {
    context,
    userDataDir,
    executablePath,
    newPage: () => context.newPage(),
    close: () =>
      (closed ??= context
        .close()
        .catch(() => undefined)
        .then(() => rm(userDataDir, { recursive: true, force: true }))),
  };
}
