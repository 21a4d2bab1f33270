import {
  type ByteRange,
  type ObjectInfo,
  type StorageAdapter,
  type WriteBody,
  type WriteOptions,
  alreadyExists,
  notFound,
} from "../src/storage/storage-adapter.js";

/** Objects in a Map, every ranged read recorded: storage for core's unit tests (atomic creates honoured). */
export class MapStorage implements StorageAdapter {
  readonly protocol = "map";
  readonly root = "map://";
  readonly objects = new Map<string, Uint8Array>();
  readonly reads: { path: string; offset: number; length: number }[] = [];

  async read(path: string, range?: ByteRange): Promise<Uint8Array> {
    const bytes = this.objects.get(path);
    if (!bytes) throw notFound(this.protocol, path, this.root);
    if (range) this.reads.push({ path, ...range });
    return range ? bytes.slice(range.offset, range.offset + range.length) : bytes;
  }

  async write(path: string, body: WriteBody, options?: WriteOptions): Promise<void> {
    if (options?.ifAbsent && this.objects.has(path)) throw alreadyExists(this.protocol, path, this.root);
    const parts: Uint8Array[] = [];
    for await (const part of body instanceof Uint8Array ? [body] : body) parts.push(part.slice());
    this.objects.set(path, new Uint8Array(Buffer.concat(parts)));
  }

  async stat(path: string): Promise<ObjectInfo | null> {
    const bytes = this.objects.get(path);
    return bytes ? { path, size: bytes.byteLength } : null;
  }

  async *list(prefix: string): AsyncIterable<ObjectInfo> {
    for (const [path, bytes] of this.objects) if (path.startsWith(prefix)) yield { path, size: bytes.byteLength };
  }

  async delete(path: string): Promise<void> {
    this.objects.delete(path);
  }

  async close(): Promise<void> {}
}
