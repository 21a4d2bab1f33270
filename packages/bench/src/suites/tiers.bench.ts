// Tiered checkpoints against saving straight to the bucket: a CheckpointManager over
// [file:// on local disk, s3:// on fauxqs in a child process] against one over s3:// alone, on the
// same 256 MiB (32 MiB quick). Figures: how long `save` and `saveAsync` block the training loop,
// the time from the save's call until the step is committed on the bucket (the `replicated`
// event; for the direct save, its own duration), and restore time from the local tier and from
// the bucket with tier 0 empty (a new node), each against a direct s3:// restore.
import { type StorageOptions } from "@cairn/core";
import { CheckpointManager } from "@cairn/manager";
import "@cairn/storage-s3";
import { startFauxqsProcess } from "@cairn/storage-s3/testing";
import { TOTAL, checkSame, movedState } from "../remote-support.js";
import { report } from "../report.js";
import { MiB, median, range, rounds, timed, withTempDir } from "../support.js";

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";

const SUITE = "tiers";
const BUCKET = "bench";
const size = `${TOTAL / MiB} MiB`;
const moved = movedState();

interface Round {
  readonly tieredSave: number;
  readonly tieredAsync: number;
  readonly durable: number;
  readonly directSave: number;
  readonly directAsync: number;
  readonly restoreLocal: number;
  readonly restoreBucket: number;
  readonly restoreDirect: number;
}

const base = { checkpointOnPreemption: false } as const;

/** A restore into `moved.into`, timed, then checked against what was saved. */
async function timedRestore(mgr: CheckpointManager, step: number, who: string): Promise<number> {
  for (const t of moved.target) t.data.fill(-1);
  const seconds = await timed(() => mgr.restore(step, moved.into));
  checkSame(who, moved.target, moved.source);
  return seconds;
}

async function tieredRound(
  dir: string,
  bucket: string,
  storageOptions: StorageOptions,
): Promise<Pick<Round, "tieredSave" | "tieredAsync" | "durable" | "restoreLocal" | "restoreBucket">> {
  const locations = [`file://${dir}/local`, bucket];
  const options = { ...base, storageOptions, replication: { retry: { baseDelayMs: 100, maxDelayMs: 1_000 } } };
  const mgr = new CheckpointManager(locations, 1, options);
  await mgr.prepare(moved.state);
  const replicatedAt = new Map<number, number>();
  mgr.on("replicated", ({ step }) => replicatedAt.set(step, performance.now()));
  const started = performance.now();
  const tieredSave = await timed(() => mgr.save(1, moved.state));
  await mgr.join();
  const durable = (replicatedAt.get(1)! - started) / 1000;
  const tieredAsync = await timed(() => mgr.saveAsync(2, moved.state));
  const result = await mgr.join();
  if (result.unreplicated?.length) throw new Error(`steps not replicated: ${JSON.stringify(result.unreplicated)}`);
  await mgr.close();
  const local = new CheckpointManager(locations, 1, options);
  const restoreLocal = await timedRestore(local, 1, "restore from the local tier");
  await local.close();
  // A new node: tier 0 is empty, the step is read from the bucket.
  const fresh = new CheckpointManager([`file://${dir}/empty`, bucket], 1, options);
  const restoreBucket = await timedRestore(fresh, 1, "restore from the bucket");
  await fresh.close();
  return { tieredSave, tieredAsync, durable, restoreLocal, restoreBucket };
}

async function directRound(
  bucket: string,
  storageOptions: StorageOptions,
): Promise<Pick<Round, "directSave" | "directAsync" | "restoreDirect">> {
  const mgr = new CheckpointManager(bucket, 1, { ...base, storageOptions });
  await mgr.prepare(moved.state);
  const directSave = await timed(() => mgr.save(1, moved.state));
  const directAsync = await timed(() => mgr.saveAsync(2, moved.state));
  await mgr.join();
  await mgr.close();
  // A new manager, as the tiered restores use: each pays for opening its storage.
  const fresh = new CheckpointManager(bucket, 1, { ...base, storageOptions });
  const restoreDirect = await timedRestore(fresh, 1, "direct restore");
  await fresh.close();
  return { directSave, directAsync, restoreDirect };
}

function reportTime(name: string, baseline: string, cairn: number[], direct: number[]): void {
  const value = median(cairn);
  const base = median(direct);
  report({
    suite: SUITE,
    name,
    value,
    unit: "s",
    baseline: { name: baseline, value: base },
    ratio: value / base,
    better: "lower",
    extra: {
      rounds: cairn.length,
      cairnS: range(cairn).map((x) => Number(x.toFixed(3))),
      baselineS: range(direct).map((x) => Number(x.toFixed(3))),
    },
  });
}

// Cairn's defaults but for the one fauxqs workaround (see the s3 suite).
const server = await startFauxqsProcess([BUCKET]);
const storageOptions: StorageOptions = {
  s3: {
    endpoint: server.endpoint,
    region: "us-east-1",
    forcePathStyle: true,
    credentials: { accessKeyId: "bench", secretAccessKey: "bench" },
    checksums: { put: true, multipart: false },
  },
};
try {
  const runs: Round[] = [];
  const n = rounds(3);
  for (let r = 0; r < n; r++) {
    await withTempDir(async (dir) => {
      // Alternate which goes first, so a warm server favours neither.
      const order = r % 2 === 0 ? (["direct", "tiered"] as const) : (["tiered", "direct"] as const);
      let tiered: Awaited<ReturnType<typeof tieredRound>> | undefined;
      let direct: Awaited<ReturnType<typeof directRound>> | undefined;
      for (const who of order) {
        if (who === "tiered") tiered = await tieredRound(dir, `s3://${BUCKET}/tiered-${r}`, storageOptions);
        else direct = await directRound(`s3://${BUCKET}/direct-${r}`, storageOptions);
      }
      runs.push({ ...tiered!, ...direct! });
    }, "cairn-bench-tiers-");
  }
  const of = (k: keyof Round): number[] => runs.map((x) => x[k]);
  reportTime(
    `save blocking, ${size}, tiers [file://, s3://]`,
    "save to s3:// directly",
    of("tieredSave"),
    of("directSave"),
  );
  reportTime(
    `saveAsync blocking, ${size}, tiers [file://, s3://]`,
    "saveAsync to s3:// directly",
    of("tieredAsync"),
    of("directAsync"),
  );
  reportTime(
    `time to durable (on the bucket), ${size}, tiers`,
    "save to s3:// directly",
    of("durable"),
    of("directSave"),
  );
  reportTime(
    `restore ${size} from the local tier`,
    "restore from s3:// directly",
    of("restoreLocal"),
    of("restoreDirect"),
  );
  reportTime(
    `restore ${size} from the bucket, tier 0 empty`,
    "restore from s3:// directly",
    of("restoreBucket"),
    of("restoreDirect"),
  );
} finally {
  await server.stop();
}
