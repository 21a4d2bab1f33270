// Issue 30, item 3: a store that stops answering (SIGSTOP) or dies (SIGKILL) mid-save or
// mid-rendezvous fails every rank with a process_group error naming the store call, within the
// documented deadline (docs/multi-node.md, "Deadlines"), instead of hanging it.
import { type ChildProcess } from "node:child_process";
import { randomUUID } from "node:crypto";
import { type AddressInfo, type Socket, connect, createServer } from "node:net";
import { rankResults, spawnTypeScript } from "@cairn/core/testing";
import { STORE_DEADLINE_MS, openStore } from "@cairn/distributed";
import { startEtcd, startRedis } from "./store-servers.js";
import { describe, it } from "vitest";
import { tempDir } from "./helpers.js";

const RANK = new URL("./fixtures/store-chaos-rank.ts", import.meta.url).pathname;
/** docs/multi-node.md: a rank waiting on a store that stopped answering fails within 2.5 deadlines, and its close() takes at most 1.5 more. */
const FAIL_WITHIN_MS = 2.5 * STORE_DEADLINE_MS;
const EXIT_WITHIN_MS = FAIL_WITHIN_MS + 1.5 * STORE_DEADLINE_MS;

interface Rank {
  readonly child: ChildProcess;
  output: string;
  readonly exited: Promise<number>;
}

function startRank(rank: number, url: string, runId: string, root: string): Rank {
  const child = spawnTypeScript(RANK, [root], {
    env: {
      ...process.env,
      RANK: String(rank),
      WORLD_SIZE: "2",
      CAIRN_STORE: url,
      CAIRN_RUN_ID: runId,
      CAIRN_STORE_LEASE_MS: "2000",
    },
  });
  const r: Rank = {
    child,
    output: "",
    exited: new Promise((resolve) => child.once("exit", () => resolve(Date.now()))),
  };
  child.stdout!.on("data", (d: Buffer) => (r.output += d.toString()));
  child.stderr!.on("data", (d: Buffer) => (r.output += d.toString()));
  return r;
}

async function until(rank: Rank, text: string): Promise<void> {
  while (!rank.output.includes(text)) {
    if (rank.child.exitCode !== null) throw new Error(`the rank exited before "${text}":\n${rank.output}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

// The cases run at once, each with its own server and ranks: each mostly waits out a deadline.
describe.concurrent.each([
  ["etcd", startEtcd],
  ["redis", startRedis],
])("ranks on a real %s store that stops", (name, startServer) => {
  for (const signal of ["SIGSTOP", "SIGKILL"] as const) {
    for (const moment of ["mid-save", "mid-rendezvous"] as const) {
      it(`${signal} ${moment}: every rank ends within the deadline with a process_group error naming the store`, async ({
        expect,
        onTestFinished,
      }) => {
        const ranks: Rank[] = [];
        const server = await startServer();
        onTestFinished(async () => {
          for (const r of ranks) r.child.kill("SIGKILL");
          await server.stop();
        });
        const root = `file://${await tempDir()}`;
        const runId = randomUUID();
        const first = startRank(0, server.url, runId, root);
        ranks.push(first);
        let second: Rank | undefined;
        if (moment === "mid-save") {
          second = startRank(1, server.url, runId, root);
          ranks.push(second);
          await until(first, "saving");
          await until(second, "saving");
          await new Promise((r) => setTimeout(r, 300));
        } else await until(first, "joining");
        // Rank 0 is waiting for rank 1 to join (or saving): the store goes away under it.
        await new Promise((r) => setTimeout(r, moment === "mid-rendezvous" ? 1500 : 0));
        const stoppedAt = Date.now();
        server.signal(signal);
        if (!second) {
          second = startRank(1, server.url, runId, root);
          ranks.push(second);
        }
        const exits = await Promise.all([first.exited, second.exited]);
        const results = rankResults<{ rank: number; code: string; message: string; failedAt: number }>(
          first.output + second.output,
        );
        expect(results.map((r) => r.rank)).toEqual([0, 1]);
        for (const r of results) {
          expect(r, `rank ${r.rank}`).toMatchObject({
            code: "process_group",
            message: expect.stringContaining(`[${name}]`),
          });
          expect(
            r.failedAt - stoppedAt,
            `rank ${r.rank} failed ${r.failedAt - stoppedAt} ms after the ${signal}`,
          ).toBeLessThan(FAIL_WITHIN_MS);
        }
        for (const exit of exits) expect(exit - stoppedAt).toBeLessThan(EXIT_WITHIN_MS);
      }, 120_000);
    }
  }
});

// The class behind a rank that failed 27 s after its Redis died: teardown (an unwatch, the lease's
// deletion, quit) waited on a store already known to be gone. Once a call failed, nothing waits.
describe.concurrent.each([
  ["etcd", startEtcd],
  ["redis", startRedis],
])("a %s client whose server went away", (_name, startServer) => {
  for (const signal of ["SIGSTOP", "SIGKILL"] as const) {
    it(`${signal}: the next call fails within the deadline, and close() then returns at once`, async ({
      expect,
      onTestFinished,
    }) => {
      const server = await startServer();
      onTestFinished(() => server.stop());
      const store = await server.open();
      await store.set("alive", "1", { lease: true });
      // A wait whose timer fires after the loss: its closing read fails, and so does its unwatch.
      const waiting = store.wait("never", 1_500).then(
        () => undefined,
        (error: unknown) => error,
      );
      await new Promise((r) => setTimeout(r, 300));
      const stoppedAt = Date.now();
      server.signal(signal);
      // Redis re-reads when the wait times out; etcd's wait just ends, and the next call fails.
      const failure =
        (await waiting) ??
        (await store.get("alive").then(
          () => undefined,
          (e: unknown) => e,
        ));
      expect(failure).toMatchObject({ code: "process_group" });
      expect(Date.now() - stoppedAt, "the failure").toBeLessThan(1_200 + STORE_DEADLINE_MS + 4_000);
      const closing = Date.now();
      await store.close();
      expect(Date.now() - closing, "close() after a failed call").toBeLessThan(STORE_DEADLINE_MS / 4);
    }, 60_000);
  }
});

// The same class, pinned without a race: a call fails on a lost connection (not on a deadline),
// then the server accepts connections and never answers. close() must not wait on it.
describe("an etcd client whose call failed on a dropped connection", () => {
  it("close() returns at once although the server now accepts and stalls", async ({ expect, onTestFinished }) => {
    const server = await startEtcd();
    const target = Number(new URL(server.url).port);
    let mode: "pass" | "drop" | "stall" = "pass";
    const sockets = new Set<Socket>();
    const proxy = createServer((client) => {
      sockets.add(client);
      client.on("close", () => sockets.delete(client));
      client.on("error", () => undefined);
      if (mode === "drop") return void client.destroy();
      if (mode === "stall") return;
      const upstream = connect(target, "127.0.0.1");
      sockets.add(upstream);
      upstream.on("close", () => sockets.delete(upstream));
      upstream.on("error", () => client.destroy());
      client.pipe(upstream).pipe(client);
    });
    await new Promise<void>((resolve) => proxy.listen(0, "127.0.0.1", resolve));
    onTestFinished(async () => {
      for (const s of sockets) s.destroy();
      proxy.close();
      await server.stop();
    });
    const port = (proxy.address() as AddressInfo).port;
    const store = await openStore(`etcd://127.0.0.1:${port}/cairn-test`, { leaseMs: 2_000 });
    await store.set("alive", "1", { lease: true });
    mode = "drop";
    for (const s of sockets) s.destroy();
    await expect(store.get("alive")).rejects.toMatchObject({ code: "process_group" });
    mode = "stall";
    const closing = Date.now();
    await store.close();
    expect(Date.now() - closing, "close() after a failed call").toBeLessThan(STORE_DEADLINE_MS / 4);
  }, 60_000);
});
