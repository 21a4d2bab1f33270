import { hostTensor, save } from "@cairn/core";
import "@cairn/storage-local";
import { describe, expect, it } from "vitest";
import { runCli } from "./main.js";
import { formatBytes, progressBar } from "./progress-bar.js";

/** ANSI "erase to end of line". */
const CLEAR_LINE = "\x1b[K";

function terminal(isTTY: boolean): { text: string; isTTY: boolean; columns: number; write(s: string): boolean } {
  const out = { text: "", isTTY, columns: 100, write: (s: string) => ((out.text += s), true) };
  return out;
}

describe("progress bars", () => {
  it("draws in place on a terminal, at most once per interval, and clears itself", () => {
    const out = terminal(true);
    let t = 0;
    const bar = progressBar(out, "copying", 4 << 20, () => t);
    bar.advance(1 << 20);
    t = 50;
    bar.advance(1 << 20);
    t = 150;
    bar.advance(1 << 20);
    const frames = out.text.split("\r").filter((f) => f !== "");
    expect(frames).toHaveLength(2);
    expect(frames[0]!.endsWith(CLEAR_LINE)).toBe(true);
    expect(frames[0]!.slice(0, -CLEAR_LINE.length)).toMatch(/^copying \[#+-+\] {2}25% 1\.0 MiB\/4\.0 MiB$/);
    expect(frames[1]).toContain(" 75% 3.0 MiB/4.0 MiB");
    bar.finish();
    expect(out.text.endsWith(`\r${CLEAR_LINE}`)).toBe(true);
  });

  it("prints nothing when the output is not a terminal", () => {
    const out = terminal(false);
    const bar = progressBar(out, "copying", 100);
    bar.advance(50);
    bar.finish();
    expect(out.text).toBe("");
  });

  it("shows on a terminal during verify, and never with --json", async () => {
    const t = hostTensor("float32", [1024]);
    await save({ w: t }, `memory://progress-${process.pid}/ckpt`);
    const tty = terminal(true);
    expect(
      await runCli(["verify", `memory://progress-${process.pid}/ckpt`], { stdout: tty, stderr: terminal(false) }),
    ).toBe(0);
    const [bar, result] = tty.text.split(`\r${CLEAR_LINE}`);
    expect(bar).toMatch(/^\rverifying \[[#-]+\] +\d+% /);
    expect(result).toMatch(/^ok: /);
    const json = terminal(true);
    expect(
      await runCli(["verify", `memory://progress-${process.pid}/ckpt`, "--json"], {
        stdout: json,
        stderr: terminal(false),
      }),
    ).toBe(0);
    expect(json.text).not.toContain("\r");
    expect(JSON.parse(json.text)).toMatchObject({ ok: true });
  });

  it("formats bytes for people", () => {
    expect([formatBytes(0), formatBytes(1023), formatBytes(1536), formatBytes(5 * 2 ** 30)]).toEqual([
      "0 B",
      "1023 B",
      "1.5 KiB",
      "5.0 GiB",
    ]);
  });
});
