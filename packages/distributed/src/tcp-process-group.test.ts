import { connect } from "node:net";
import { afterEach, describe, expect, it } from "vitest";
import { initProcessGroup } from "./init-process-group.js";
import { freePort } from "./launch-ranks.js";
import { TcpProcessGroup } from "./tcp-process-group.js";

const open: TcpProcessGroup[] = [];

afterEach(async () => {
  await Promise.all(open.splice(0).map((g) => g.close()));
});

/** `worldSize` ranks in this process, each with its own connection, as separate processes would have. */
async function groups(worldSize: number, timeoutMs = 10_000): Promise<TcpProcessGroup[]> {
  const port = await freePort();
  const all = await Promise.all(
    Array.from({ length: worldSize }, (_, rank) => TcpProcessGroup.connect({ rank, worldSize, host: "127.0.0.1", port, timeoutMs })),
  );
  open.push(...all);
  return all;
}

describe("TcpProcessGroup", () => {
  it("runs allGather, broadcast and barrier across ranks", async () => {
    const g = await groups(3);
    expect(await Promise.all(g.map((r) => r.allGather({ rank: r.rank, text: `r${r.rank}` })))).toEqual(
      Array(3).fill([{ rank: 0, text: "r0" }, { rank: 1, text: "r1" }, { rank: 2, text: "r2" }]),
    );
    expect(await Promise.all(g.map((r) => r.broadcast(r.rank === 2 ? ["from", 2] : undefined, 2)))).toEqual(Array(3).fill(["from", 2]));
    await Promise.all(g.map((r) => r.barrier()));
  });

  it("keeps the collectives of different tags apart, so they need no order between each other", async () => {
    const g = await groups(2);
    // Rank 0 starts "a" first, rank 1 starts "b" first: with one sequence this would pair a with b.
    const a0 = g[0]!.group("a").allGather("a0");
    const b0 = g[0]!.group("b").allGather("b0");
    const b1 = g[1]!.group("b").allGather("b1");
    const a1 = g[1]!.group("a").allGather("a1");
    expect(await Promise.all([a0, a1, b0, b1])).toEqual([["a0", "a1"], ["a0", "a1"], ["b0", "b1"], ["b0", "b1"]]);
  });

  it("delivers posted messages to every rank without a collective", async () => {
    const g = await groups(3);
    const got = g.map((r) => new Promise((resolve) => r.on("preempt", (value, from) => resolve({ value, from }))));
    g[1]!.post("preempt", { step: 7 });
    expect(await Promise.all(got)).toEqual(Array(3).fill({ value: { step: 7 }, from: 1 }));
  });

  it("fails the others at once, naming the rank, when a rank leaves before a collective", async () => {
    const g = await groups(3);
    await g[2]!.close();
    const results = await Promise.allSettled([g[0]!.allGather(0), g[1]!.allGather(1)]);
    for (const r of results) {
      expect(r.status).toBe("rejected");
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 2 closed the process group/) });
    }
    await expect(g[0]!.barrier()).rejects.toMatchObject({ code: "process_group" });
  });

  it("times out a collective that a rank never reaches, naming the rank", async () => {
    const g = await groups(3, 500);
    const results = await Promise.allSettled([g[0]!.allGather(0), g[2]!.allGather(2)]);
    for (const r of results) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 1 did not reach allGather #1 within 0\.5 s/) });
    }
  });

  it("fails when ranks call different collectives", async () => {
    const g = await groups(2);
    const results = await Promise.allSettled([g[0]!.allGather(0), g[1]!.broadcast(undefined)]);
    for (const r of results) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ message: expect.stringMatching(/every rank must call the same collectives in the same order/) });
    }
  });

  it("fails the join, naming the missing rank, when a rank never arrives", async () => {
    const port = await freePort();
    const joining = [0, 1].map((rank) => TcpProcessGroup.connect({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 500 }));
    for (const r of await Promise.allSettled(joining)) {
      expect((r as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 2 did not join within 0\.5 s/) });
    }
  });

  it("refuses a second process claiming a rank, and a different world size", async () => {
    const port = await freePort();
    const first = [0, 1].map((rank) => TcpProcessGroup.connect({ rank, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 2000 }));
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 3, host: "127.0.0.1", port, timeoutMs: 2000 })).rejects.toMatchObject({
      message: expect.stringMatching(/two processes claim RANK=1/),
    });
    await expect(TcpProcessGroup.connect({ rank: 2, worldSize: 4, host: "127.0.0.1", port, timeoutMs: 2000 })).rejects.toMatchObject({
      message: expect.stringMatching(/WORLD_SIZE=4 but rank 0 says 3/),
    });
    await Promise.allSettled(first);
  });

  it("admits only ranks that show the job's token, and a stray client cannot claim a rank", async () => {
    const port = await freePort();
    const token = "job-secret";
    const rank0 = TcpProcessGroup.connect({ rank: 0, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token });
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token: "guess" })).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/did not show the job's token/),
    });
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000 })).rejects.toMatchObject({ message: expect.stringMatching(/token/) });
    const g = await Promise.all([rank0, TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, token })]);
    open.push(...g);
    expect(await Promise.all(g.map((r) => r.allGather(r.rank)))).toEqual([[0, 1], [0, 1]]);
  });

  it("refuses a rank address other hosts can reach without a token", async () => {
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "10.1.2.3", port: 29500 })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/CAIRN_JOB_TOKEN/),
    });
  });

  it("cuts off a client that grows a line without end before it says hello, and the job goes on", async () => {
    const g = await groups(2);
    const port = g[0]!.serverPort!;
    const closed = await new Promise<string>((resolve) => {
      const socket = connect({ host: "127.0.0.1", port }, () => {
        const chunk = "x".repeat(16 * 1024);
        for (let i = 0; i < 64 && !socket.destroyed; i++) socket.write(chunk);
      });
      let answer = "";
      socket.on("data", (d: Buffer) => (answer += d.toString()));
      socket.on("error", () => undefined);
      socket.on("close", () => resolve(answer));
    });
    expect(closed).toMatch(/a message longer than 65536 bytes/);
    expect(await Promise.all(g.map((r) => r.allGather(r.rank)))).toEqual([[0, 1], [0, 1]]);
  });

  it("carries a message split over many packets, and refuses to send one over maxMessageBytes", async () => {
    const port = await freePort();
    const g = await Promise.all([0, 1].map((rank) => TcpProcessGroup.connect({ rank, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 5000, maxMessageBytes: 4 * 1024 * 1024 })));
    open.push(...g);
    const long = "é".repeat(1_000_000);
    const gathered = await Promise.all(g.map((r) => r.allGather(`${r.rank}${long}`)));
    expect(gathered[1]!.map((v) => `${v.length}:${v.slice(0, 2)}`)).toEqual(["1000001:0é", "1000001:1é"]);
    const results = await Promise.allSettled([g[0]!.allGather("x".repeat(5 * 1024 * 1024)), g[1]!.allGather("small")]);
    expect((results[0] as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/cannot send its value for allGather #2: .*longer than the limit/) });
    expect((results[1] as PromiseRejectedResult).reason).toMatchObject({ code: "process_group", message: expect.stringMatching(/rank 0 failed: cannot send/) });
  });

  it("gives up connecting when rank 0 never listens", async () => {
    const port = await freePort();
    await expect(TcpProcessGroup.connect({ rank: 1, worldSize: 2, host: "127.0.0.1", port, timeoutMs: 300 })).rejects.toMatchObject({
      code: "process_group",
      message: expect.stringMatching(/cannot reach rank 0 at 127\.0\.0\.1:\d+ .*is rank 0 running/),
    });
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
    const env = (rank: number) => ({ RANK: String(rank), WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: String(port) });
    const [a, b] = await Promise.all([initProcessGroup({ env: env(0) }), initProcessGroup({ env: env(1) })]);
    expect(await Promise.all([a.allGather(a.rank), b.allGather(b.rank)])).toEqual([[0, 1], [0, 1]]);
    await Promise.all([a.close(), b.close()]);
  });

  it("says which variable is missing or malformed", async () => {
    await expect(initProcessGroup({ env: { RANK: "1", WORLD_SIZE: "2", MASTER_PORT: "1234" } })).rejects.toMatchObject({
      code: "invalid_argument",
      message: expect.stringMatching(/env:\/\/ needs MASTER_ADDR/),
    });
    await expect(initProcessGroup({ env: { RANK: "one", WORLD_SIZE: "2" } })).rejects.toMatchObject({ message: expect.stringMatching(/RANK="one" is not a non-negative integer/) });
    await expect(initProcessGroup({ env: { RANK: "2", WORLD_SIZE: "2", MASTER_ADDR: "127.0.0.1", MASTER_PORT: "1234" } })).rejects.toMatchObject({
      message: expect.stringMatching(/RANK must be an integer in 0\.\.1/),
    });
    await expect(initProcessGroup({ initMethod: "file:///tmp/x" })).rejects.toMatchObject({ message: expect.stringMatching(/use env:\/\/ or tcp:\/\/host:port/) });
  });
});
