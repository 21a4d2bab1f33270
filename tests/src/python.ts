import { execFileSync } from "node:child_process";

/** CI=true (any value but "", "0", "false"): a test whose requirement is missing fails instead of being skipped. */
export const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);

/** A Python (the image's python3, or Debian's) that imports every module of `modules`, or undefined. */
export function findPython(modules: readonly string[]): string | undefined {
  for (const python of ["python3", "/usr/bin/python3"]) {
    try {
      execFileSync(python, ["-c", modules.map((m) => `import ${m}`).join("; ")], { stdio: "ignore" });
      return python;
    } catch {
      // try the next one
    }
  }
  return undefined;
}

/**
 * The Python with numpy to run. Without one the test is skipped, naming the command that enables
 * it (`enable`); in CI it fails instead (.ci/run installs it).
 */
export function pythonWithNumpy(skip: (condition: boolean, note: string) => void, enable: string): string {
  const python = findPython(["numpy"]);
  skip(python === undefined && !inCI, enable);
  if (python === undefined) throw new Error(`CI=true and this test ${enable} (.ci/run installs it)`);
  return python;
}
