// The browser demo (`pnpm demo:browser`): a small tfjs model trains in the page and is checkpointed
// to OPFS every N steps; after a reload it resumes from the newest step and ends with the same
// weights as a run that never stopped. Buttons export the newest step as one safetensors file and
// load a checkpoint published on a web server. Query: ?run=NAME&steps=200&every=20&backend=webgl.
import { CheckpointReader, exportSafetensors } from "@cairn/core/ops";
import { openStorage } from "@cairn/core/storage";
import { readMetadata } from "@cairn/core";
import { CheckpointManager, stepDir } from "@cairn/manager";
import "@cairn/storage-browser";
import "@cairn/storage-http";
import { Training, useBackend } from "./training.js";

const query = new URLSearchParams(location.search);

function count(name: string, fallback: number): number {
  const raw = query.get(name);
  const value = raw === null ? fallback : Number(raw);
  if (!Number.isSafeInteger(value) || value < 1) throw new Error(`?${name}= takes a positive integer, not ${raw}`);
  return value;
}

const STEPS = count("steps", 200);
const EVERY = count("every", 20);
const RUN = query.get("run") ?? "demo";
if (!/^[\w-]{1,64}$/.test(RUN)) throw new Error(`?run= takes letters, digits, - and _, not ${RUN}`);
const ROOT = `opfs://cairn-demo/${RUN}`;

function element<T extends HTMLElement = HTMLElement>(id: string): T {
  const found = document.getElementById(id);
  if (!found) throw new Error(`the page has no #${id}`);
  return found as T;
}

function log(line: string): void {
  const pre = element("log");
  pre.textContent += `${line}\n`;
  pre.scrollTop = pre.scrollHeight;
}

function show(id: string, text: string): void {
  element(id).textContent = text;
}

/** Turns a button's action into one that reports its failure instead of leaving a rejected promise. */
function onClick(id: string, action: () => Promise<void>): void {
  const button = element<HTMLButtonElement>(id);
  button.addEventListener("click", () => {
    button.disabled = true;
    action()
      .catch((error: unknown) => log(`${id} failed: ${String(error)}`))
      .finally(() => (button.disabled = false));
  });
}

let stopped = false;
let manager: CheckpointManager | undefined;

/** Restores the newest step of ROOT if there is one, then trains to STEPS, saving every EVERY steps. */
async function train(): Promise<void> {
  const backend = await useBackend(query.get("backend") ?? "webgl");
  show("backend", backend);
  show("root", ROOT);
  show("every", String(EVERY));
  manager = new CheckpointManager(ROOT, EVERY, { maxToKeep: 3 });
  manager.on("committed", ({ step }) => log(`checkpointed step ${step}`));
  const run = new Training();
  const latest = await manager.latestStep();
  if (latest !== undefined) {
    await run.restore(manager, latest);
    show("resumed", `resumed from step ${latest}`);
    log(`resumed from step ${latest}`);
  }
  const progress = element<HTMLProgressElement>("progress");
  progress.max = STEPS;
  for (let step = (latest ?? 0) + 1; step <= STEPS && !stopped; step++) {
    const loss = await run.step();
    progress.value = step;
    show("status", `step ${step} of ${STEPS}, loss ${loss.toFixed(5)}`);
    if (manager.shouldSave(step)) await manager.saveAsync(step, await run.stateDict());
    // The page is being hidden or closed (the manager's SIGTERM): its checkpoint is taken, stop here.
    if (manager.reachedPreemption(step)) {
      show("status", `stopped at step ${step}: the page was hidden; reload to resume`);
      return;
    }
  }
  await manager.join();
  if (stopped) return;
  show("status", `trained ${STEPS} steps`);
  show("checksum", await run.weightsChecksum());
}

/** Consolidates the newest step into one safetensors file and hands it to the browser as a download. */
async function exportNewest(): Promise<void> {
  const step = await manager?.latestStep();
  if (step === undefined) throw new Error("no step saved yet");
  const source = await openStorage(ROOT);
  const out = await openStorage("memory://cairn-demo-export");
  const name = `cairn-demo-${RUN}-step-${step}.safetensors`;
  try {
    const metadata = await readMetadata({ storage: source, path: stepDir(step) });
    const reader = new CheckpointReader(source, stepDir(step), metadata);
    try {
      await exportSafetensors(reader, { storage: out, name }, { force: true });
    } finally {
      await reader.close();
    }
    const bytes = await out.read(name);
    const link = document.createElement("a");
    link.href = URL.createObjectURL(new Blob([bytes as Uint8Array<ArrayBuffer>], { type: "application/octet-stream" }));
    link.download = name;
    link.click();
    setTimeout(() => URL.revokeObjectURL(link.href), 60_000);
    log(`exported step ${step} as ${name} (${bytes.byteLength} bytes)`);
  } finally {
    await out.delete(name).catch(() => undefined);
    await Promise.all([source.close(), out.close()]);
  }
}

/** Restores the newest step published at the URL into a fresh model, and shows its weights checksum. */
async function loadFromUrl(): Promise<void> {
  const url = element<HTMLInputElement>("url").value.trim();
  if (!/^https?:\/\//.test(url)) throw new Error(`give an https:// (or http://) URL, not ${JSON.stringify(url)}`);
  const remote = new CheckpointManager(url, 1, { readOnly: true });
  const run = new Training();
  try {
    const step = await remote.latestStep();
    if (step === undefined) throw new Error(`${url} lists no step`);
    await run.restore(remote, step);
    const checksum = await run.weightsChecksum();
    show("loaded", `loaded step ${step} from ${url}: weights checksum ${checksum}`);
    log(`loaded step ${step} from ${url} (weights checksum ${checksum})`);
  } finally {
    run.dispose();
    await remote.close();
  }
}

/** Stops training, deletes every step of this run and reloads: the next run starts from scratch. */
async function startOver(): Promise<void> {
  stopped = true;
  if (manager) {
    await manager.join();
    for (const step of await manager.allSteps()) await manager.delete(step);
    await manager.close();
  }
  location.reload();
}

element<HTMLInputElement>("url").value = query.get("url") ?? `${location.origin}/sample-run`;
onClick("export", exportNewest);
onClick("load", loadFromUrl);
onClick("restart", startOver);
train().catch((error: unknown) => {
  show("status", `failed: ${String(error)}`);
  log(String((error as Error).stack ?? error));
});
