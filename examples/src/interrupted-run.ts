// How the demo tests stop a demo as a user would: a signal once it committed a step.
import { spawnTypeScript } from "@cairn/core/testing";

/**
 * Starts `script` with `args`, sends `signal` once it printed its first `committed step` line
 * (after a further `delayMs`), and collects its exit code and output.
 */
export async function interrupted(
  script: string,
  args: readonly string[],
  signal: NodeJS.Signals,
  delayMs = 0,
): Promise<{ code: number | null; stdout: string; stderr: string }> {
  const child = spawnTypeScript(script, args);
  let stdout = "";
  let stderr = "";
  child.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) => child.once("exit", (code) => resolve(code)));
  await new Promise<void>((resolve, reject) => {
    child.stdout?.on("data", (d: Buffer) => {
      stdout += d.toString();
      if (stdout.includes("committed step ")) resolve();
    });
    void exited.then((code) => reject(new Error(`the demo exited before committing a step (${code}): ${stderr}`)));
  });
  if (delayMs > 0) await new Promise((r) => setTimeout(r, delayMs));
  child.kill(signal);
  return { code: await exited, stdout, stderr };
}
