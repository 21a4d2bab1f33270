export { managerRunSuite, type ManagerRunOptions } from "./manager-run-suite.js";
