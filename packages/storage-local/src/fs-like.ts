/** The subset of `fs.promises` the adapter uses; node:fs and memfs both provide it. */
export interface FsPromisesLike {
  /** Numeric flags are only passed when the adapter was created with `directIo`. */
  open(path: string, flags: string | number, mode?: number): Promise<FileHandleLike>;
  mkdir(path: string, options?: { recursive: boolean }): Promise<unknown>;
  rename(from: string, to: string): Promise<void>;
  link(existing: string, created: string): Promise<void>;
  unlink(path: string): Promise<void>;
  rmdir(path: string): Promise<void>;
  stat(path: string): Promise<{ size: number; mtime: Date; isFile(): boolean; isDirectory(): boolean }>;
  readdir(
    path: string,
    options: { withFileTypes: true },
  ): Promise<{ name: string | Buffer; isDirectory(): boolean; isFile(): boolean }[]>;
}

/** The most one `read` or `write` call of a handle is asked for: node's fs aborts the process on a read past 2³¹−1 bytes, and refuses such a write. */
export const MAX_CALL_BYTES = 2 ** 30;

export interface FileHandleLike {
  /** The descriptor, where there is a real one (node:fs). */
  readonly fd?: number;
  read(buffer: Uint8Array, offset: number, length: number, position: number): Promise<{ bytesRead: number }>;
  readv(buffers: readonly Uint8Array[], position: number): Promise<{ bytesRead: number }>;
  write(
    buffer: Uint8Array,
    offset: number,
    length: number,
    position?: number | null,
  ): Promise<{ bytesWritten: number }>;
  truncate(length: number): Promise<void>;
  stat(): Promise<{ size: number; isFile(): boolean; isDirectory(): boolean }>;
  sync(): Promise<void>;
  close(): Promise<void>;
}
