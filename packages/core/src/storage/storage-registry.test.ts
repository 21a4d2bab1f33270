import { describe, expect, it } from "vitest";
import { openStorage, redactUrl, registerStorage, storageUrl } from "./storage-registry.js";

describe("storage registry", () => {
  it("treats plain paths as file:// URLs", () => {
    expect(storageUrl("/runs/exp1").href).toBe("file:///runs/exp1");
    expect(storageUrl("runs/exp1").protocol).toBe("file:");
    expect(storageUrl("s3://bucket/a").protocol).toBe("s3:");
  });

  it("names the package to install for a well-known protocol that is not installed", async () => {
    await expect(openStorage("s3://bucket/run1")).rejects.toMatchObject({
      code: "unsupported_protocol",
      message: expect.stringContaining('install @cairn/storage-s3 and import it once: import "@cairn/storage-s3"'),
    });
    await expect(openStorage("gs://bucket/run1")).rejects.toMatchObject({ message: expect.stringContaining("@cairn/storage-gcs") });
  });

  it("says how to register an unknown protocol", async () => {
    await expect(openStorage("ftp://host/x")).rejects.toMatchObject({
      code: "unsupported_protocol",
      message: expect.stringContaining('registerStorage("ftp", factory)'),
    });
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

  it("keeps credentials out of URLs shown in messages", () => {
    expect(redactUrl(new URL("s3://KEY:SECRET@bucket/x?token=abc"))).toBe("s3://bucket/x");
  });
});
