import { describe, expect, it, vi } from "vitest";
import { CHROMIUM_INSTALL_COMMAND, chromiumFlags, chromiumPath, requireChromium } from "./chromium.js";

describe("the skip rule", () => {
  const missing = { CHROMIUM_PATH: "/nonexistent/chromium" };

  it("skips a test without Chromium outside CI, naming the install command", () => {
    const skip = vi.fn((condition: boolean, note?: string) => {
      if (condition) throw new Error(`skipped: ${note}`);
    });
    expect(() => requireChromium(skip, { ...missing, CI: "false" })).toThrow(CHROMIUM_INSTALL_COMMAND);
    expect(skip).toHaveBeenCalledWith(true, expect.stringContaining(CHROMIUM_INSTALL_COMMAND));
  });

  it("fails it under CI=true, naming the install command", () => {
    const skip = vi.fn();
    expect(() => requireChromium(skip, { ...missing, CI: "true" })).toThrow(/CI=true.*apt-get install chromium/);
    expect(skip).toHaveBeenCalledWith(false, expect.any(String));
  });

  it("finds CHROMIUM_PATH only when it is executable", () => {
    expect(chromiumPath(missing)).toBeUndefined();
    expect(chromiumPath({ CHROMIUM_PATH: process.execPath })).toBe(process.execPath);
  });
});

describe("the flags", () => {
  it("turn the GPU off unless SwiftShader is asked for, and keep every network feature off", () => {
    expect(chromiumFlags()).toEqual(
      expect.arrayContaining(["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic"]),
    );
    const gpu = chromiumFlags("swiftshader");
    expect(gpu).toEqual(expect.arrayContaining(["--use-angle=swiftshader", "--enable-unsafe-swiftshader"]));
    expect(gpu).not.toContain("--disable-gpu");
  });
});
