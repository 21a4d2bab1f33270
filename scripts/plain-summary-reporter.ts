import type { Reporter, TestModule } from "vitest/node";

/**
 * Prints the run's totals as one plain line, `N passed, N failed` (and `N skipped`), after
 * vitest's own summary, so CI logs that read closing lines count the tests. Each test skipped
 * with a note (`ctx.skip(note)`, e.g. the command that installs what it needs) is listed above.
 */
export default class PlainSummaryReporter implements Reporter {
  onTestRunEnd(testModules: ReadonlyArray<TestModule>): void {
    let passed = 0;
    let failed = 0;
    let skipped = 0;
    const notes: string[] = [];
    for (const module of testModules) {
      for (const test of module.children.allTests()) {
        const result = test.result();
        if (result.state === "passed") passed++;
        else if (result.state === "failed") failed++;
        else {
          skipped++;
          if (result.state === "skipped" && result.note)
            notes.push(
              `skipped: ${module.moduleId.replace(`${process.cwd()}/`, "")} > ${test.fullName}: ${result.note}`,
            );
        }
      }
      if (module.state() === "failed" && [...module.children.allTests()].length === 0) failed++;
    }
    const lines = notes.length ? `\n${notes.join("\n")}\n` : "";
    process.stdout.write(`${lines}\n${passed} passed, ${failed} failed${skipped ? `, ${skipped} skipped` : ""}\n`);
  }
}
