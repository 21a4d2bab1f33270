// Issue 30, item 8: every path that writes to file:// (core's save, the upload worker's own
// adapter behind saveAsync, a tier's copy) reports a read-only file system as permission_denied,
// at once, never as a transient `storage` error worth retrying. Run on a real read-only tmpfs.
import { execFileSync } from "node:child_process";
import { mkdir, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { type CheckpointError, type StateDict, hostTensor, save } from "@cairn/core";
import { openFileStorageForWorker } from "@cairn/storage-local";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckpointManager } from "../src/checkpoint-manager.js";
import type { ManagerEvents } from "../src/events/manager-events.js";

const inCI = process.env.CI !== undefined && !["", "0", "false"].includes(process.env.CI);
const isRoot = process.getuid?.() === 0;
const NEEDS = "needs root to mount a read-only tmpfs (run as root, or CI=true .ci/run)";

// 1.5 MiB: written with O_DIRECT where the file system takes it, beside a small value.
const state = (): StateDict => ({ w: hostTensor("float32", [3 << 17], new Float32Array(3 << 17).fill(1)), n: 1 });

/** The errno at the end of an error's chain of causes. */
function errnoAtRoot(error: unknown): unknown {
  let at = error as { cause?: unknown; code?: unknown } | undefined;
  while (at?.cause !== undefined) at = at.cause as typeof at;
  return at?.code;
}

/** What a read-only file system must give: permission_denied, not retried, saying so, the kernel's EROFS as the root cause. */
function expectReadOnly(error: unknown): void {
  expect(error).toMatchObject({ code: "permission_denied", message: expect.stringMatching(/read-only \(EROFS\)/) });
  expect((error as CheckpointError).transient).toBe(false);
  expect(errnoAtRoot(error)).toBe("EROFS");
}

const failure = (promise: Promise<unknown>): Promise<unknown> =>
  promise.then(
    () => expect.fail("resolved"),
    (error: unknown) => error,
  );

describe.skipIf(!isRoot && !inCI)(`file:// on a read-only file system (${NEEDS})`, () => {
  let mount = "";
  let writable = "";
  beforeAll(async () => {
    if (!isRoot) throw new Error(`CI=true and this test ${NEEDS}`);
    mount = await mkdtemp(join(tmpdir(), "cairn-read-only-"));
    writable = await mkdtemp(join(tmpdir(), "cairn-writable-"));
    execFileSync("mount", ["-t", "tmpfs", "-o", "size=4m", "tmpfs", mount]);
    await mkdir(join(mount, "existing"));
    execFileSync("mount", ["-o", "remount,ro", mount]);
  });
  afterAll(async () => {
    if (mount) execFileSync("umount", [mount]);
    await Promise.all([mount, writable].filter(Boolean).map((d) => rm(d, { recursive: true, force: true })));
  });

  // A root that exists (open fails with EROFS) and one whose directories would have to be made (node's recursive mkdir says ENOENT).
  const roots = (): string[] => [join(mount, "existing"), join(mount, "new/run")];

  it("core's save and the upload worker's adapter", async () => {
    for (const root of roots()) {
      expectReadOnly(await failure(save(state(), `${root}/1`)));
      const worker = openFileStorageForWorker(pathToFileURL(root));
      expectReadOnly(await failure(worker.write("1/x", new Uint8Array(8))));
      expectReadOnly(await failure(worker.write("1/y", new Uint8Array(2 << 20))));
    }
  });

  it("a manager's save and saveAsync", async () => {
    for (const root of roots()) {
      const mgr = new CheckpointManager(root, 1, { checkpointOnPreemption: false });
      expectReadOnly(await failure(mgr.save(1, state())));
      const errors: ManagerEvents["error"][] = [];
      mgr.on("error", (e) => errors.push(e));
      await mgr.saveAsync(2, state());
      expectReadOnly(await failure(mgr.join()));
      expect(errors).toEqual([expect.objectContaining({ operation: "save", step: 2 })]);
      expectReadOnly(errors[0]!.error);
      await mgr.close();
    }
  });

  it("a tier's copy to a read-only slower tier", async () => {
    const mgr = new CheckpointManager([writable, join(mount, "new/bucket")], 1, {
      checkpointOnPreemption: false,
      replication: { retry: { baseDelayMs: 10, maxDelayMs: 10 } },
    });
    const errors: ManagerEvents["error"][] = [];
    mgr.on("error", (e) => errors.push(e));
    await mgr.save(1, state());
    const { unreplicated } = await mgr.close({ timeoutMs: 1_000 });
    expect(unreplicated).toEqual([expect.objectContaining({ step: 1, tier: 1 })]);
    expectReadOnly(unreplicated?.[0]?.error);
    expect(errors).toEqual([expect.objectContaining({ operation: "replication", step: 1, tier: 1 })]);
    expectReadOnly(errors[0]!.error);
  });
});
