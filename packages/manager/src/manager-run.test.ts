import { managerRunSuite } from "./testing/index.js";

let roots = 0;
managerRunSuite("memory://", { url: () => `memory://manager-run/${process.pid}-${roots++}` });
