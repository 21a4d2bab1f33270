import { describe, expect, it } from "vitest";
import { type TfjsModule, registerTfjs, tfjsModule } from "./tfjs.js";

describe("the tfjs module", () => {
  it("is the registered one once registerTfjs was called (a page's only way), unless a call passes its own", async () => {
    const registered: TfjsModule = {
      tensor: () => ({ shape: [], dtype: "float32", data: async () => new Float32Array(0), dispose() {} }),
    };
    const given: TfjsModule = { tensor: registered.tensor };
    registerTfjs(registered);
    expect(await tfjsModule()).toBe(registered);
    expect(await tfjsModule(given)).toBe(given);
  });

  it("refuses to register what is not tfjs", () => {
    expect(() => registerTfjs({} as TfjsModule)).toThrow(expect.objectContaining({ code: "invalid_argument" }));
    expect(() => registerTfjs(null as unknown as TfjsModule)).toThrow(/registerTfjs takes the tfjs module/);
  });
});
