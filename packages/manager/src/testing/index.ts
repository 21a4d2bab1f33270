export { managerRunSuite, sameState, type ManagerRunOptions } from "./manager-run-suite.js";
