// @cairn/browser-testing: headless Chromium for Cairn's tests (see README.md).
export {
  CHROMIUM_INSTALL_COMMAND,
  DEFAULT_CHROMIUM_PATH,
  type ChromiumLaunchOptions,
  type ChromiumSession,
  chromiumFlags,
  chromiumPath,
  inCI,
  launchChromium,
  requireChromium,
} from "./chromium.js";
export { type StaticServer, type StaticServerOptions, serveStatic } from "./static-server.js";
export { type BrowserBundle, type BrowserBundleOptions, BROWSER_CONDITIONS, bundleForBrowser } from "./bundle.js";
export {
  type TestPage,
  type TestPageServer,
  type TestPageServerOptions,
  openTestPage,
  serveTestPage,
} from "./test-page.js";
export { type ChromiumSuite, chromiumSuite } from "./chromium-suite.js";
/** A tab, for tests that drive a page through its DOM. */
export type { Page } from "playwright-core";
