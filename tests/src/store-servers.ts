// Real etcd and Redis servers for tests, on free ports of 127.0.0.1. The binaries come from PATH
// (CI installs Debian's etcd-server and redis-server) or, without root, from Debian's packages
// unpacked into a cache: `apt-get download` checks them against the signed indexes; `dpkg -x` needs no root.
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { mkdir, mkdtemp, readdir, rename, rm, symlink } from "node:fs/promises";
import { tmpdir } from "node:os";
import { delimiter, join } from "node:path";
import { fileURLToPath } from "node:url";
import { promisify } from "node:util";
import { type Store, TcpStore, TcpStoreServer, freePort, openStore } from "@cairn/distributed";

const run = promisify(execFile);
const CACHE = fileURLToPath(new URL("../../node_modules/.cache/cairn-store-servers/", import.meta.url));
const PACKAGES = ["etcd-server", "redis-tools", "libjemalloc2", "liblzf1"];

export interface TestServer {
  /** The store URL of a fresh prefix on this server. */
  readonly url: string;
  /** A new client of this server, as one rank would open it (leases of 2 s). */
  open(): Promise<Store>;
  /** Sends the server process a signal (SIGSTOP freezes it, SIGKILL kills it): chaos tests. */
  signal(signal: NodeJS.Signals): void;
  stop(): Promise<void>;
}

interface Binary {
  readonly path: string;
  readonly env: NodeJS.ProcessEnv;
}

/** `name` from PATH, else from the cache of unpacked Debian packages (filled on first use). */
async function binary(name: "etcd" | "redis-server"): Promise<Binary> {
  if (process.env.CAIRN_STORE_SERVERS !== "download") {
    for (const dir of (process.env.PATH ?? "").split(delimiter)) {
      if (dir && existsSync(join(dir, name))) return { path: join(dir, name), env: process.env };
    }
  }
  const root = join(CACHE, "root");
  if (!existsSync(join(root, "usr/bin", name))) await provision(root);
  return {
    path: join(root, "usr/bin", name),
    env: { ...process.env, LD_LIBRARY_PATH: join(root, "usr/lib/x86_64-linux-gnu") },
  };
}

async function provision(root: string): Promise<void> {
  await mkdir(CACHE, { recursive: true });
  const work = await mkdtemp(join(CACHE, "download-"));
  try {
    await run("apt-get", ["download", ...PACKAGES], { cwd: work }).catch((error: unknown) => {
      throw new Error(
        `the store tests need etcd and redis-server: none on PATH, and \`apt-get download ${PACKAGES.join(" ")}\` failed (${(error as Error).message.trim()}). Install Debian's etcd-server and redis-server, or put etcd and redis-server on PATH`,
        { cause: error },
      );
    });
    const unpacked = join(work, "root");
    for (const deb of (await readdir(work)).filter((f) => f.endsWith(".deb")))
      await run("dpkg", ["-x", join(work, deb), unpacked]);
    await symlink("redis-check-rdb", join(unpacked, "usr/bin/redis-server"));
    // Concurrent test files may provision at once: the first rename wins, the others keep theirs.
    await rename(unpacked, root).catch((error: NodeJS.ErrnoException) => {
      if (!existsSync(join(root, "usr/bin/etcd"))) throw error;
    });
  } finally {
    await rm(work, { recursive: true, force: true });
  }
}

/** Starts `program` and resolves once it prints `ready`; rejects with its output if it exits first. */
async function start(program: Binary, args: string[], ready: RegExp, dir: string): Promise<ChildProcess> {
  const child = spawn(program.path, args, { env: program.env, stdio: ["ignore", "pipe", "pipe"] });
  let output = "";
  await new Promise<void>((resolve, reject) => {
    const onData = (chunk: Buffer): void => {
      output += chunk.toString();
      if (ready.test(output)) resolve();
    };
    child.stdout!.on("data", onData);
    child.stderr!.on("data", onData);
    child.once("error", reject);
    child.once("exit", (code) =>
      reject(new Error(`${program.path} exited with ${code} before it was ready:\n${output}`)),
    );
  });
  child.stdout!.removeAllListeners("data").resume();
  child.stderr!.removeAllListeners("data").resume();
  child.removeAllListeners("exit");
  child.once("exit", () => void rm(dir, { recursive: true, force: true }));
  return child;
}

async function stopper(child: ChildProcess, dir: string): Promise<void> {
  if (child.exitCode === null && child.signalCode === null) {
    const exited = new Promise((resolve) => child.once("exit", resolve));
    child.kill("SIGKILL");
    await exited;
  }
  await rm(dir, { recursive: true, force: true });
}

/** A single-member etcd on free client and peer ports, its data in a temporary directory. */
export async function startEtcd(): Promise<TestServer> {
  const [client, peer] = [await freePort(), await freePort()];
  const dir = await mkdtemp(join(tmpdir(), "cairn-etcd-"));
  const peerUrl = `http://127.0.0.1:${peer}`;
  const child = await start(
    await binary("etcd"),
    [
      "--name",
      "cairn-test",
      "--data-dir",
      dir,
      "--listen-client-urls",
      `http://127.0.0.1:${client}`,
      "--advertise-client-urls",
      `http://127.0.0.1:${client}`,
      "--listen-peer-urls",
      peerUrl,
      "--initial-advertise-peer-urls",
      peerUrl,
      "--initial-cluster",
      `cairn-test=${peerUrl}`,
    ],
    /ready to serve client requests/,
    dir,
  );
  const url = `etcd://127.0.0.1:${client}/cairn-test`;
  return {
    url,
    open: () => openStore(url, { leaseMs: 2_000 }),
    signal: (signal) => void child.kill(signal),
    stop: () => stopper(child, dir),
  };
}

/** A Redis with no persistence on a free port. */
export async function startRedis(): Promise<TestServer> {
  const port = await freePort();
  const dir = await mkdtemp(join(tmpdir(), "cairn-redis-"));
  const child = await start(
    await binary("redis-server"),
    ["--port", String(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", dir],
    /Ready to accept connections/,
    dir,
  );
  const url = `redis://127.0.0.1:${port}/cairn-test`;
  return {
    url,
    open: () => openStore(url, { leaseMs: 2_000 }),
    signal: (signal) => void child.kill(signal),
    stop: () => stopper(child, dir),
  };
}

/** The embedded TCP store, as rank 0 hosts it, with a job token. */
export async function startTcpStore(): Promise<TestServer> {
  const token = "test-token";
  const server = await TcpStoreServer.listen("127.0.0.1", 0, { token });
  return {
    url: `tcp://127.0.0.1:${server.port}`,
    open: () => TcpStore.connect({ host: "127.0.0.1", port: server.port, token, timeoutMs: 5_000 }),
    signal: () => {
      throw new Error("the embedded TCP store runs in this process: it cannot be sent a signal");
    },
    stop: () => server.close(0),
  };
}
