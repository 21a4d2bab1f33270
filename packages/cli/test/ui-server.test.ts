import { spawn } from "node:child_process";
import { writeFile } from "node:fs/promises";
import { request } from "node:http";
import type { networkInterfaces } from "node:os";
import { join } from "node:path";
import { describe, expect, it } from "vitest";
import { openLocation } from "../src/location.js";
import { runCli } from "../src/main.js";
import { allowedHosts } from "../src/ui/request-guard.js";
import { RunView } from "../src/ui/run-view.js";
import { type UiServer, startUiServer } from "../src/ui/ui-server.js";
import type { StepsResponse, VerifyEvent } from "../src/ui/ui-types.js";
import { BIN, cairn, jsonLines } from "./helpers.js";
import { HOSTILE_METRIC, stepsOnDisk, damage, loss, writeUiRun } from "./ui-run.js";

interface Answer {
  readonly status: number;
  readonly headers: Record<string, string | string[] | undefined>;
  readonly body: string;
}

/** A request with the headers given as they are (fetch would not let a test set Host). */
function http(url: string, options: { method?: string; headers?: Record<string, string> } = {}): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method: options.method ?? "GET", headers: options.headers ?? {} }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (d: string) => (body += d));
      res.on("end", () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.once("error", reject);
    req.end();
  });
}

async function serve(tiers: readonly string[]): Promise<{ server: UiServer; close(): Promise<void> }> {
  const locations = await Promise.all(tiers.map((t) => openLocation(t)));
  const server = await startUiServer(new RunView(locations, { refreshMs: 1000 }));
  return {
    server,
    close: async () => {
      await server.close();
      await Promise.all(locations.map((l) => l.close()));
    },
  };
}

describe("cairn ui's server", () => {
  it("answers only GET and HEAD, with the token, to its own Host and Origin; every answer carries the security headers", async () => {
    const { tiers } = await writeUiRun();
    const { server, close } = await serve(tiers);
    try {
      const base = `http://127.0.0.1:${server.port}`;
      const page = await http(server.url);
      expect(page.status).toBe(200);
      expect(page.headers["content-type"]).toBe("text/html; charset=utf-8");
      expect(page.headers["content-security-policy"]).toContain("script-src 'self'");
      expect(page.headers["x-content-type-options"]).toBe("nosniff");
      expect(page.body).toContain('<script type="module" src="page.js"></script>');
      expect((await http(`${server.url}page.js`)).status).toBe(200);
      expect((await http(`${server.url}api/steps`)).status).toBe(200);
      expect((await http(`${server.url}api/steps`, { method: "HEAD" })).status).toBe(200);
      // The token: missing, wrong, or a prefix of the real one.
      for (const path of [
        "/",
        "/api/steps",
        "/page.js",
        `/${server.token.slice(0, -1)}/api/steps`,
        `/x${server.token}/`,
      ])
        expect((await http(`${base}${path}`)).status, path).toBe(403);
      // Host and Origin: another site's name pointing at 127.0.0.1 (DNS rebinding) is refused.
      for (const host of [
        "evil.example",
        `evil.example:${server.port}`,
        `127.0.0.1.evil.example:${server.port}`,
        `127.0.0.1:${server.port + 1}`,
      ])
        expect((await http(`${server.url}api/steps`, { headers: { Host: host } })).status, host).toBe(403);
      for (const host of [`localhost:${server.port}`, `[::1]:${server.port}`])
        expect((await http(`${server.url}api/steps`, { headers: { Host: host } })).status, host).toBe(200);
      expect((await http(`${server.url}api/steps`, { headers: { Origin: "http://evil.example" } })).status).toBe(403);
      expect((await http(`${server.url}api/steps`, { headers: { Origin: base } })).status).toBe(200);
      // Read-only: nothing but GET and HEAD.
      for (const method of ["POST", "PUT", "DELETE", "PATCH", "OPTIONS"])
        expect((await http(`${server.url}api/steps`, { method })).status, method).toBe(405);
      const bare = await http(`${base}/${server.token}`);
      expect([bare.status, bare.headers.location]).toEqual([308, `/${server.token}/`]);
      expect((await http(`${server.url}api/nothing`)).status).toBe(404);
      expect((await http(`${server.url}api/step?step=abc`)).status).toBe(400);
      expect((await http(`${server.url}api/step?step=007`)).status).toBe(400);
      expect((await http(`${server.url}api/stats?step=60&key=nope`)).status).toBe(400);
      expect((await http(`${server.url}api/stats?step=60&key=${encodeURIComponent('["nope"]')}`)).status).toBe(404);
      expect((await http(`${server.url}api/step?step=60&tier=9`)).status).toBe(400);
    } finally {
      await close();
    }
  });

  it("lists the steps of every tier as cairn ls does, with metrics, sizes and save times; an unchanged listing is a 304", async () => {
    const { tiers } = await writeUiRun();
    const { server, close } = await serve(tiers);
    try {
      const first = await http(`${server.url}api/steps`);
      const run = JSON.parse(first.body) as StepsResponse;
      const onDisk = await Promise.all(tiers.map(stepsOnDisk));
      const all = [...new Set(onDisk.flatMap((steps) => [...steps.keys()]))].sort((a, b) => a - b);
      expect(run.steps.map((s) => s.step)).toEqual(all);
      // Tier 0 keeps 3 steps (and the directory of step 10, whose file later steps reference); tier 1 every 20th.
      expect(all).toEqual([10, 20, 40, 50, 60]);
      for (const row of run.steps) {
        expect(row.tiers).toEqual(onDisk.map((steps) => steps.get(row.step) ?? null));
        if (row.state !== "committed") continue;
        expect(row.metrics).toEqual({ loss: loss(row.step), [HOSTILE_METRIC]: row.step / 100 });
        expect(row.saveSeconds).toBeGreaterThanOrEqual(0);
      }
      expect(run.steps.some((s) => (s.referencedBytes ?? 0) > 16384)).toBe(true);
      expect(run.metrics).toEqual([HOSTILE_METRIC, "loss"].sort());
      expect(run.newestVerified).toBeNull();
      const ls = jsonLines(await cairn(["ls", ...tiers, "--json"]))[0] as {
        tiers: { steps: { step: number; bytes: number }[] }[];
      };
      for (const row of run.steps)
        expect(row.bytes).toBe(ls.tiers[row.tier]!.steps.find((s) => s.step === row.step)!.bytes);
      const again = await http(`${server.url}api/steps`, { headers: { "If-None-Match": String(first.headers.etag) } });
      expect(again.status).toBe(304);
    } finally {
      await close();
    }
  });

  it("gives the same statistics and diff as cairn stats and cairn diff, and verifies with progress, naming the damaged file", async () => {
    const { tiers } = await writeUiRun();
    const damagedFile = await damage(tiers[0], 50, "w");
    const { server, close } = await serve(tiers);
    try {
      const stats = JSON.parse(
        (await http(`${server.url}api/stats?step=60&key=${encodeURIComponent('["nonfinite"]')}`)).body,
      );
      const cli = jsonLines(await cairn(["stats", `${tiers[0]}/60`, "nonfinite", "--json"]))[0] as {
        tensors: unknown[];
      };
      expect(stats).toEqual({ step: 60, tier: 0, stats: cli.tensors[0] });
      expect(stats.stats.nan).toBe(1);
      const diff = JSON.parse((await http(`${server.url}api/diff?a=40&b=60`)).body);
      const cliDiff = jsonLines(await cairn(["diff", `${tiers[0]}/40`, `${tiers[0]}/60`, "--json"]))[0] as Record<
        string,
        unknown
      >;
      expect(diff.entries).toEqual(cliDiff.entries);
      expect(
        diff.entries.filter((e: { status: string }) => e.status !== "identical").map((e: { name: string }) => e.name),
      ).toEqual(["w", "half"]);

      const verify = await http(`${server.url}api/verify?step=50`);
      expect(verify.headers["content-type"]).toBe("application/x-ndjson; charset=utf-8");
      const events = verify.body
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as VerifyEvent);
      expect(events[0]).toMatchObject({ type: "start", step: 50, tier: 0 });
      expect(events.some((e) => e.type === "progress")).toBe(true);
      const done = events.at(-1)!;
      expect(done).toMatchObject({
        type: "done",
        ok: false,
        damagedKeys: ["w"],
        verification: { ok: false, tier: 0, by: "ui" },
      });
      expect(done.type === "done" && done.damaged.map((d) => d.file)).toContain(damagedFile);
      const good = (await http(`${server.url}api/verify?step=60`)).body
        .trim()
        .split("\n")
        .map((l) => JSON.parse(l) as VerifyEvent);
      expect(good.at(-1)).toMatchObject({ type: "done", ok: true, damaged: [] });
      const run = JSON.parse((await http(`${server.url}api/steps`)).body) as StepsResponse;
      expect(run.newestVerified).toBe(60);
      expect(run.steps.find((s) => s.step === 50)!.verification).toMatchObject({ ok: false });

      // A metadata.json that cannot be parsed is damage too, as cairn verify reports it.
      await writeFile(join(tiers[1], "40", "metadata.json"), "{ not json");
      const listed = JSON.parse((await http(`${server.url}api/steps`)).body) as StepsResponse;
      expect(listed.steps.find((s) => s.step === 40)!.tiers).toEqual(["committed", "damaged"]);
      const broken = (await http(`${server.url}api/verify?step=40&tier=1`)).body.trim().split("\n");
      expect(JSON.parse(broken.at(-1)!)).toMatchObject({
        type: "done",
        ok: false,
        damaged: [{ file: "metadata.json" }],
      });
    } finally {
      await close();
    }
  });

  it("allows, for a wildcard bind, this machine's addresses and name, and nothing else", () => {
    const interfaces = {
      lo: [{ address: "127.0.0.1" }, { address: "::1" }],
      eth0: [{ address: "10.1.2.3" }, { address: "fe80::1" }],
    } as unknown as ReturnType<typeof networkInterfaces>;
    expect([...allowedHosts("0.0.0.0", 80, interfaces, "Box")].sort()).toEqual(
      ["10.1.2.3:80", "127.0.0.1:80", "[::1]:80", "[fe80::1]:80", "box:80", "localhost:80"].sort(),
    );
    expect([...allowedHosts("10.1.2.3", 8080, interfaces, "box")].sort()).toEqual(
      ["10.1.2.3:8080", "127.0.0.1:8080", "[::1]:8080", "localhost:8080"].sort(),
    );
  });
});

describe("cairn ui", () => {
  it("prints its URL, serves until its signal aborts, then exits 0; a root with nothing is an error", async () => {
    const { tiers } = await writeUiRun();
    const controller = new AbortController();
    let stdout = "";
    const printed = new Promise<string>((resolve) => {
      const code = runCli(["ui", ...tiers, "--json"], {
        stdout: {
          write: (text: string) => {
            stdout += text;
            resolve(stdout);
            return true;
          },
        },
        stderr: { write: () => true },
        signal: controller.signal,
      });
      void code.then((c) => (exit = c));
    });
    let exit: number | undefined;
    const { url } = JSON.parse(await printed) as { url: string };
    expect(url).toMatch(/^http:\/\/127\.0\.0\.1:\d+\/[\w-]{32}\/$/);
    expect((await http(`${url}api/steps`)).status).toBe(200);
    controller.abort();
    await expect.poll(() => exit).toBe(0);
    await expect(http(`${url}api/steps`)).rejects.toThrow();
    const missing = await cairn(["ui", `${tiers[0]}-nothing`]);
    expect(missing.code).toBe(1);
    expect((await cairn(["ui", tiers[0], "--port", "70000"])).code).toBe(1);
  });

  it("runs from the bin: the page is bundled from its sources, Ctrl-C stops it", async () => {
    const { tiers } = await writeUiRun();
    const child = spawn(process.execPath, [BIN, "ui", tiers[0], "--json"], { stdio: ["ignore", "pipe", "pipe"] });
    let stderr = "";
    child.stderr.on("data", (d: Buffer) => (stderr += d.toString()));
    const exited = new Promise<number | null>((resolve) => child.once("close", resolve));
    const line = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        if (out.includes("\n")) resolve(out.split("\n")[0]!);
      });
      child.once("close", () => reject(new Error(`cairn ui exited: ${stderr}`)));
    });
    const { url } = JSON.parse(line) as { url: string };
    const script = await http(`${url}page.js`);
    expect(script.status).toBe(200);
    expect(script.body.length).toBeGreaterThan(20_000);
    child.kill("SIGINT");
    expect(await exited, stderr).toBe(0);
  });
});
