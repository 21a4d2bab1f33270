import { readdir } from "node:fs/promises";
import { type Socket, connect } from "node:net";
import type { StoreProcessGroup } from "./store-process-group.js";
import { type TestContext, describe, expect, it, vi } from "vitest";
import { initProcessGroup } from "./init-process-group.js";
import { freePort } from "./launch-ranks.js";
import { connectTcpProcessGroup } from "./tcp-process-group.js";
import { TcpStoreServer } from "./tcp-store-server.js";

/** `worldSize` ranks in this process, each with its own connection, as separate processes would have; closed when the test ends. */
async function groups(
  onTestFinished: TestContext["onTestFinished"],
  worldSize: number,
  options: { timeoutMs?: number; token?: string; maxMessageBytes?: number } = {},
): Promise<{ groups: StoreProcessGroup[]; port: number }> {
  const port = await freePort();
  const all = await Promise.all(
    Array.from({ length: worldSize }, (_, rank) =>
      connectTcpProcessGroup({ rank, worldSize, host: "127.0.0.1", port, timeoutMs: 10_000, ...options }),
    ),
  );
  onTestFinished(async () => {
    await Promise.allSettled(all.map((g) => g.close()));
  });
  return { groups: all, port };
}

// The cases run at once, each on its own port: several wait out a join's timeout.
describe.concurrent("the embedded TCP store", () => {
  it("runs the collectives, and fails the others at once, naming the rank, when a rank's connection drops", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g } = await groups(onTestFinished, 3);
    expect(await Promise.all(g.map((r) => r.allGather(r.rank)))).toEqual(Array(3).fill([0, 1, 2]));
    expect(await Promise.all(g.map((r) => r.broadcast(r.rank === 1 ? "one" : undefined, 1)))).toEqual([
      "one",
      "one",
      "one",
    ]);
    await g[2]!.close();
    for (const r of await Promise.allSettled([g[0]!.allGather(0), g[1]!.allGather(1)])) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: "process_group",
        message: expect.stringMatching(/rank 2 closed the process group before reaching allGather #3/),
      });
    }
  });

  it("fails the join, naming the missing rank, when a rank never arrives", async ({ expect }) => {
    const port = await freePort();
    const joining = [0, 1].map((rank) =>
      connectTcpProcessGroup({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 1500 }),
    );
    for (const r of await Promise.allSettled(joining)) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: "process_group",
        message: expect.stringMatching(
          /rank 2 did not join on tcp:\/\/127\.0\.0\.1:\d+ within 1\.5 s; start every rank with the same MASTER_ADDR/,
        ),
      });
    }
  });

  it("refuses a second process claiming a rank, and a different world size", async ({ expect }) => {
    const port = await freePort();
    const first = [0, 1].map((rank) =>
      connectTcpProcessGroup({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 3000 }),
    );
    await expect(
      connectTcpProcessGroup({ rank: 1, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 3000 }),
    ).rejects.toMatchObject({ message: expect.stringMatching(/RANK=1 of run job .* is already taken/) });
    await expect(
      connectTcpProcessGroup({ rank: 2, worldSize: 4, host: "127.0.0.1", port, timeoutMs: 3000 }),
    ).rejects.toMatchObject({ message: expect.stringMatching(/WORLD_SIZE=4 but run job on .* has 3/) });
    await Promise.allSettled(first);
  });

  it("admits only ranks that show the job's token, and refuses an address other hosts reach without one", async ({
    expect,
    onTestFinished,
  }) => {
    const port = await freePort();
    const token = "job-secret";
    const rank0 = connectTcpProcessGroup({ rank: 0, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token });
    await expect(
      connectTcpProcessGroup({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token: "guess" }),
    ).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/did not show the job's token/),
    });
    await expect(
      connectTcpProcessGroup({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000 }),
    ).rejects.toMatchObject({ message: expect.stringMatching(/token/) });
    const g = await Promise.all([
      rank0,
      connectTcpProcessGroup({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token }),
    ]);
    onTestFinished(async () => {
      await Promise.allSettled(g.map((r) => r.close()));
    });
    expect(await Promise.all(g.map((r) => r.allGather(r.rank)))).toEqual([
      [0, 1],
      [0, 1],
    ]);
    await expect(
      connectTcpProcessGroup({ rank: 1, worldSize: 2, host: "10.1.2.3", port: 29500 }),
    ).rejects.toMatchObject({ code: "invalid_argument", message: expect.stringMatching(/CAIRN_JOB_TOKEN/) });
  });

  it("cuts off a client that grows a line without end before it says hello, and the job goes on", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g, port } = await groups(onTestFinished, 2);
    const answer = await new Promise<string>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port }, () => {
        const chunk = "x".repeat(16 * 1024);
        for (let i = 0; i < 64 && !socket.destroyed; i++) socket.write(chunk);
      });
      let text = "";
      socket.on("data", (d: Buffer) => (text += d.toString()));
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(text));
    });
    expect(answer).toMatch(/a message longer than 65536 bytes/);
    expect(await Promise.all(g.map((r) => r.allGather(r.rank)))).toEqual([
      [0, 1],
      [0, 1],
    ]);
  });

  it("carries long values split over many packets, and refuses to send one over maxMessageBytes, failing the others too", async ({
    expect,
    onTestFinished,
  }) => {
    const { groups: g } = await groups(onTestFinished, 2);
    const long = "é".repeat(1_000_000);
    const gathered = await Promise.all(g.map((r) => r.allGather(`${r.rank}${long}`)));
    expect(gathered[1]!.map((v) => `${v.length}:${v.slice(0, 2)}`)).toEqual(["1000001:0é", "1000001:1é"]);
    const { groups: small } = await groups(onTestFinished, 2, { maxMessageBytes: 64 * 1024 });
    const results = await Promise.allSettled([small[0]!.allGather("x".repeat(100_000)), small[1]!.allGather("small")]);
    for (const r of results)
      expect((r as PromiseRejectedResult).reason).toMatchObject({
        code: "process_group",
        message: expect.stringMatching(/allGather #1 failed: .*longer than the limit of 65536/),
      });
  });

  it("gives up connecting when rank 0 never listens", async ({ expect }) => {
    const port = await freePort();
    await expect(
      connectTcpProcessGroup({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 300 }),
    ).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/cannot reach rank 0 at tcp:\/\/127\.0\.0\.1:\d+ .*is rank 0 running/),
    });
  });
});

// Alone: it counts this process's open descriptors.
describe("the embedded TCP store's server", () => {
  it("closes every refused client's socket, even one that never closes its own side (issue 30, item 7)", async () => {
    const server = await TcpStoreServer.listen("127.0.0.1", 0, { token: "job-secret" });
    const fds = async (): Promise<number> => (await readdir("/proc/self/fd")).length;
    const before = await fds();
    const clients = await Promise.all(
      Array.from(
        { length: 200 },
        () =>
          new Promise<Socket>((resolve) => {
            // allowHalfOpen: the client keeps its side open after the server's FIN, as a careless or hostile one would.
            const socket = connect({ host: "127.0.0.1", port: server.port, allowHalfOpen: true }, () =>
              socket.write(`${JSON.stringify({ op: "hello", token: "wrong" })}\n`),
            );
            socket.on("error", () => undefined);
            socket.once("data", () => resolve(socket));
          }),
      ),
    );
    // The clients' 200 descriptors stay; the server's must go.
    await vi.waitFor(async () => expect((await fds()) - before).toBeLessThan(200 + 20), { timeout: 5_000 });
    for (const socket of clients) socket.destroy();
    await server.close(0);
  });
});

describe("initProcessGroup", () => {
  it("is a group of one without WORLD_SIZE", async () => {
    const group = await initProcessGroup({ env: {} });
    expect([group.rank, group.worldSize]).toEqual([0, 1]);
    expect(await group.allGather("x")).toEqual(["x"]);
    await group.close();
  });

  it("joins ranks through env://", async () => {
    const port = await freePort();
    const env = (rank: number) => ({
      RANK: String(rank),
      WORLD_SIZE: "2",
      MASTER_ADDR: "127.0.0.1",
      MASTER_PORT: String(port),
    });
    const [a, b] = await Promise.all([initProcessGroup({ env: env(0) }), initProcessGroup({ env: env(1) })]);
    expect(await Promise.all([a.allGather(a.rank), b.allGather(b.rank)])).toEqual([
      [0, 1],
      [0, 1],
    ]);
    await Promise.all([a.close(), b.close()]);
  });

  it("says which variable is missing or malformed", async () => {
    await expect(initProcessGroup({ env: { RANK: "1", WORLD_SIZE: "2", MASTER_PORT: "1234" } })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/env:\/\/ needs MASTER_ADDR/),
    });
    await expect(initProcessGroup({ env: { RANK: "one", WORLD_SIZE: "2" } })).rejects.toMatchObject({
      message: expect.stringMatching(/RANK="one" is not a non-negative integer/),
    });
    await expect(
      initProcessGroup({ env: { RANK: "2", WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "1234" } }),
    ).rejects.toMatchObject({
      message: expect.stringMatching(/RANK must be an integer in 0\.\.1/),
    });
    await expect(initProcessGroup({ initMethod: "file:///tmp/x" })).rejects.toMatchObject({
      message: expect.stringMatching(/use env:\/\/ or tcp:\/\/host:port/),
    });
  });
});
