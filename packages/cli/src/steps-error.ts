import { type CheckpointErrorCode, CheckpointError } from "@cairn/core";
import type { StepProblem } from "@cairn/manager";

/**
 * One error for the steps a command could not handle, after it handled the rest: `corrupt`
 * when every one is damaged (exit code 3), else the first other problem's code.
 */
export function stepsError(problems: readonly StepProblem[], what: string, where: string): CheckpointError {
  const other = problems.find((p) => p.code !== "corrupt");
  const code: CheckpointErrorCode =
    other === undefined ? "corrupt" : other.code === "internal" ? "storage" : other.code;
  const list = problems.map((p) => `step ${p.step} (${p.message})`).join("; ");
  return new CheckpointError(code, `${what} under ${where}: ${list}`, {
    context: { path: where, step: problems[0]?.step },
  });
}
