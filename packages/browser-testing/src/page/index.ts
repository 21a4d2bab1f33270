// @cairn/browser-testing/page: the browser side of a test page. No Node import: it is bundled into pages.
export { type PageFunction, exposeToTests } from "./expose.js";
export { type SuiteApi, SuiteRunner } from "./suite-runner.js";
