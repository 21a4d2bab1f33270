// s3:// against the SDK's own transfer of the same bytes, on fauxqs (the S3 server the tests
// use) in a child process on 127.0.0.1: Cairn's save vs `@aws-sdk/lib-storage` Upload (its
// default 5 MiB parts, queue of 4 per object), Cairn's load vs parallel ranged GetObject into
// the same tensors; then the requests each makes for one save and one load, counted by a proxy.
import { DeleteObjectCommand, GetObjectCommand, ListObjectsV2Command, S3Client } from "@aws-sdk/client-s3";
import { Upload } from "@aws-sdk/lib-storage";
import { type StorageOptions, load, save } from "@cairn/core";
import { FaultProxy } from "@cairn/core/testing";
import "@cairn/storage-s3";
import { s3Operation, startFauxqsProcess, withoutListedPartChecksums } from "@cairn/storage-s3/testing";
import {
  READ_BYTES,
  TENSORS,
  TOTAL,
  bytesOf,
  countRequests,
  movedState,
  rangedReads,
  reportRate,
  reportRequests,
  timeSavesAndLoads,
} from "../remote-support.js";
import { MiB, rounds } from "../support.js";

process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED = "true";

const SUITE = "s3";
const BUCKET = "bench";
const CREDENTIALS = { accessKeyId: "bench", secretAccessKey: "bench" };
const size = `${TOTAL / MiB} MiB in ${TENSORS} tensors`;

const clientFor = (endpoint: string): S3Client =>
  new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials: CREDENTIALS });

// Cairn's defaults as against AWS (8 MiB parts, 8 requests in flight, a CRC32C with every part
// and object, its client retrying nothing itself), but for the one fauxqs workaround: it stores
// an empty object when CompleteMultipartUpload lists part checksums, so that list is dropped.
const cairnClientFor = (endpoint: string): S3Client =>
  withoutListedPartChecksums(
    new S3Client({ endpoint, region: "us-east-1", forcePathStyle: true, credentials: CREDENTIALS, maxAttempts: 1 }),
  );
const storageOptionsFor = (client: S3Client): StorageOptions => ({ s3: { client } });

const moved = movedState();
const { source, state, target, into } = moved;

const sdkSave = (client: S3Client, prefix: string): Promise<unknown> =>
  Promise.all(
    source.map((t, i) =>
      new Upload({ client, params: { Bucket: BUCKET, Key: `${prefix}/t${i}`, Body: bytesOf(t) } }).done(),
    ),
  );

const sdkLoad = (client: S3Client, prefix: string): Promise<void> =>
  rangedReads(TENSORS, async (o, offset, length) => {
    const response = await client.send(
      new GetObjectCommand({ Bucket: BUCKET, Key: `${prefix}/t${o}`, Range: `bytes=${offset}-${offset + length - 1}` }),
    );
    bytesOf(target[o]!).set(await response.Body!.transformToByteArray(), offset);
  });

async function removePrefix(client: S3Client, prefix: string): Promise<void> {
  const listed = await client.send(new ListObjectsV2Command({ Bucket: BUCKET, Prefix: `${prefix}/` }));
  for (const o of listed.Contents ?? []) await client.send(new DeleteObjectCommand({ Bucket: BUCKET, Key: o.Key! }));
}

const server = await startFauxqsProcess([BUCKET]);
const client = clientFor(server.endpoint);
const cairnClient = cairnClientFor(server.endpoint);
const storageOptions = storageOptionsFor(cairnClient);
try {
  const n = rounds(3);
  const { saves, loads } = await timeSavesAndLoads(moved, n, {
    serverPid: server.pid,
    cairnUrl: (r) => `s3://${BUCKET}/cairn-${r}`,
    storageOptions,
    sdkSave: (r) => sdkSave(client, `sdk-${r}`),
    sdkLoad: (r) => sdkLoad(client, `sdk-${r}`),
    sdkLoadName: "ranged GetObject",
  });
  for (let r = 0; r < n; r++) for (const prefix of [`cairn-${r}`, `sdk-${r}`]) await removePrefix(client, prefix);
  reportRate(SUITE, `save ${size} to s3:// (fauxqs)`, "lib-storage Upload, default parts and queue", saves);
  reportRate(
    SUITE,
    `load ${size} from s3:// (fauxqs)`,
    `ranged GetObject, ${READ_BYTES / MiB} MiB x 8 in flight`,
    loads,
  );

  // Untimed: the same save and load once more through a counting proxy.
  const proxy = await FaultProxy.start(server.endpoint);
  const counted = clientFor(proxy.url);
  const cairnCounted = cairnClientFor(proxy.url);
  try {
    const classify = (r: { method: string; url: string }): string | undefined =>
      (Object.keys(s3Operation) as (keyof typeof s3Operation)[]).find(
        (k) => k !== "part" && (s3Operation[k] as (r: unknown) => boolean)(r),
      );
    const countOf = async (work: () => Promise<unknown>): Promise<Record<string, number>> => {
      proxy.requests.length = 0;
      await work();
      return countRequests(proxy.requests, classify);
    };
    const viaProxy = storageOptionsFor(cairnCounted);
    const cairnSaveCount = await countOf(() =>
      save(state, { checkpointId: `s3://${BUCKET}/cairn-count`, storageOptions: viaProxy }),
    );
    const sdkSaveCount = await countOf(() => sdkSave(counted, "sdk-count"));
    const cairnLoadCount = await countOf(() =>
      load(into, { checkpointId: `s3://${BUCKET}/cairn-count`, storageOptions: viaProxy }),
    );
    const sdkLoadCount = await countOf(() => sdkLoad(counted, "sdk-count"));
    reportRequests(SUITE, `requests per save, ${size}`, "lib-storage Upload", cairnSaveCount, sdkSaveCount);
    reportRequests(SUITE, `requests per load, ${size}`, "ranged GetObject", cairnLoadCount, sdkLoadCount);
    for (const prefix of ["cairn-count", "sdk-count"]) await removePrefix(client, prefix);
  } finally {
    counted.destroy();
    cairnCounted.destroy();
    await proxy.close();
  }
} finally {
  client.destroy();
  cairnClient.destroy();
  await server.stop();
}
