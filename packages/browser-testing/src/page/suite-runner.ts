// Test cases written for vitest's describe/it/hooks/expect, run inside a page: the cases register
// through `api`, and the Node-side test runs each by its full name (`runCase`), so vitest reports
// every case of a shared suite (core's storage contract) one by one.
import { JestAsymmetricMatchers, JestChaiExpect, JestExtend } from "@vitest/expect";
import * as chai from "chai";

chai.use(JestExtend);
chai.use(JestChaiExpect);
chai.use(JestAsymmetricMatchers);

type Hook = () => Promise<void> | void;

interface Case {
  readonly name: string;
  readonly body: () => Promise<void> | void;
  readonly before: readonly Hook[];
  readonly after: readonly Hook[];
}

export interface SuiteApi {
  describe(name: string, options: unknown, body?: () => void): void;
  it(name: string, body: () => Promise<void> | void): void;
  beforeEach(hook: Hook): void;
  afterEach(hook: Hook): void;
  // eslint-disable-next-line @typescript-eslint/no-explicit-any -- chai's expect extended with Jest's matchers
  expect: (actual: unknown, message?: string) => any;
}

/** Cases registered through `api`; the same registration in Node gives the same names (`caseNames`). */
export class SuiteRunner {
  readonly #cases = new Map<string, Case>();
  readonly api: SuiteApi;

  constructor() {
    const path: string[] = [];
    const before: Hook[][] = [[]];
    const after: Hook[][] = [[]];
    this.api = {
      describe: (name, options, body) => {
        const run = (typeof options === "function" ? options : body) as () => void;
        path.push(name);
        before.push([...before[before.length - 1]!]);
        after.push([...after[after.length - 1]!]);
        try {
          run();
        } finally {
          path.pop();
          before.pop();
          after.pop();
        }
      },
      it: (name, body) => {
        const full = [...path, name].join(" > ");
        this.#cases.set(full, {
          name: full,
          body,
          before: before[before.length - 1]!,
          after: after[after.length - 1]!,
        });
      },
      beforeEach: (hook) => void before[before.length - 1]!.push(hook),
      afterEach: (hook) => void after[after.length - 1]!.unshift(hook),
      expect: chai.expect as SuiteApi["expect"],
    };
  }

  names(): string[] {
    return [...this.#cases.keys()];
  }

  /** Runs one case with its hooks; rejects with the case's failure (an after-hook's if the case passed). */
  async run(name: string): Promise<void> {
    const test = this.#cases.get(name);
    if (!test) throw new Error(`no case named ${JSON.stringify(name)}; the page has: ${this.names().join(" | ")}`);
    let failure: unknown;
    try {
      for (const hook of test.before) await hook();
      await test.body();
    } catch (error) {
      failure = error;
    }
    for (const hook of test.after) {
      try {
        await hook();
      } catch (error) {
        failure ??= error;
      }
    }
    if (failure !== undefined) throw failure;
  }
}
