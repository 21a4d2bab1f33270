import { SuiteRunner, exposeToTests } from "@cairn/browser-testing/page";
import { registerContracts } from "./contract-cases.js";

const runner = new SuiteRunner();
registerContracts(runner.api);

exposeToTests({
  names: () => runner.names(),
  run: (name: string) => runner.run(name),
});
