import { tmpdir } from "node:os";
import { fileURLToPath } from "node:url";
import { describe, expect, it } from "vitest";
import { runTypeScript } from "../testing/run-typescript.js";
import { checkStorageUrl, openStorage, redactUrl, registerStorage, storageUrl } from "./storage-registry.js";

describe("storage registry", () => {
  it("treats plain paths as file:// URLs", () => {
    expect(storageUrl("/runs/exp1").href).toBe("file:///runs/exp1");
    expect(storageUrl("runs/exp1").protocol).toBe("file:");
    expect(storageUrl("s3://bucket/a").protocol).toBe("s3:");
  });

  // Two Node processes, one after the other: under CI's double load each can take seconds to start.
  it("names the package to install for a well-known protocol that is not installed", { timeout: 60_000 }, async () => {
    // In a real Node process, from a directory whose project has no storage packages, without the
    // NODE_PATH pnpm's shims set (it exposes every workspace package): a user's project sees neither.
    const script = fileURLToPath(new URL("../../test/fixtures/open-missing-protocol.ts", import.meta.url));
    for (const [url, name] of [
      ["s3://bucket/run1", "@cairn/storage-s3"],
      ["gs://bucket/run1", "@cairn/storage-gcs"],
    ] as const) {
      const run = await runTypeScript(script, [url], { cwd: tmpdir(), env: { NODE_PATH: undefined } });
      expect(run.code, run.stderr).toBe(0);
      expect(JSON.parse(run.stdout)).toEqual({
        code: "unsupported_protocol",
        message: `no storage is registered for ${url.slice(0, 2)}:// URLs (${url}); install ${name} and import it once: import "${name}"`,
      });
    }
  });

  it("says how to register an unknown protocol, listing the known ones and the package adding each", async () => {
    const expected = {
      code: "unsupported_protocol",
      context: { protocol: "ftp" },
      message: expect.stringMatching(/known: .*s3:\/\/ \(@cairn\/storage-s3\).*registerStorage\("ftp", factory\)/),
    };
    await expect(openStorage("ftp://host/x")).rejects.toMatchObject(expected);
    expect(() => checkStorageUrl("ftp://host/x")).toThrow(expect.objectContaining(expected));
    expect(checkStorageUrl("gs://bucket/run").protocol).toBe("gs:");
  });

  it("uses a registered factory and passes its options through", async () => {
    let seen: unknown;
    registerStorage("test-proto", (url, options) => {
      seen = { url: url.href, options };
      return { protocol: "test-proto" } as never;
    });
    await openStorage("test-proto://b/p", { a: 1 });
    expect(seen).toEqual({ url: "test-proto://b/p", options: { a: 1 } });
  });

  it("refuses locations that are not strings or not URLs with invalid_argument, without credentials", () => {
    for (const bad of [undefined, null, 42, {}, ["/x"]]) {
      expect(() => storageUrl(bad as never)).toThrow(expect.objectContaining({ code: "invalid_argument" }));
    }
    const error = (() => {
      try {
        storageUrl("file://user:secret@host:notaport/x");
      } catch (e) {
        return e as Error;
      }
      return undefined;
    })();
    expect(error).toMatchObject({
      code: "invalid_argument",
      cause: expect.objectContaining({ code: "ERR_INVALID_URL" }),
    });
    expect(error?.message).not.toContain("secret");
  });

  it("keeps credentials out of URLs shown in messages", () => {
    expect(redactUrl(new URL("s3://KEY:SECRET@bucket/x?token=abc"))).toBe("s3://bucket/x");
  });
});
