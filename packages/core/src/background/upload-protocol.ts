import { type CheckpointErrorCode, type CheckpointErrorContext, CheckpointError } from "../errors.js";
import type { Leaf } from "../state/leaf.js";
import type { SaveOptions, SaveResult } from "../save/save-options.js";
import type { PortableStorage } from "../storage/storage-adapter.js";

/** The save options a worker thread can use: plain data (the abort signal is forwarded as a message). */
export type PortableSaveOptions = Pick<SaveOptions, "blockSize" | "concurrency" | "retry" | "metadata" | "incremental">;

/** A rank's share of a save, for the upload worker: its staged leaves, planned with the other ranks, written from shared memory, then committed. */
export interface UploadJob {
  readonly job: number;
  readonly storage: PortableStorage;
  readonly dir: string;
  readonly where: string;
  readonly rank: number;
  readonly worldSize: number;
  /** Staged leaves: those copy staging laid out as a planned file carry their place in it (`Leaf.staged`). */
  readonly leaves: readonly Leaf[];
  readonly options: PortableSaveOptions;
}

export type ToUploadWorker =
  | ({ readonly type: "save" } & UploadJob)
  | { readonly type: "abort"; readonly job: number }
  | { readonly type: "collective"; readonly call: number; readonly ok: true; readonly value: unknown }
  | { readonly type: "collective"; readonly call: number; readonly ok: false; readonly error: WireError };

export type FromUploadWorker =
  | { readonly type: "done"; readonly job: number; readonly result: Omit<SaveResult, "seconds"> }
  | { readonly type: "failed"; readonly job: number; readonly error: WireError }
  | {
      readonly type: "collective";
      readonly job: number;
      readonly call: number;
      readonly op: "allGather" | "broadcast" | "barrier";
      readonly value?: unknown;
      readonly root?: number;
    }
  /** The worker loaded its code and takes jobs. */
  | { readonly type: "ready" }
  /** The worker could not load its code; no job can run there. */
  | { readonly type: "fatal"; readonly message: string };

/** An error as it crosses threads: a `CheckpointError` keeps its code and context. */
export interface WireError {
  readonly code?: CheckpointErrorCode;
  readonly message: string;
  readonly context?: CheckpointErrorContext;
}

export function errorToWire(error: unknown): WireError {
  if (error instanceof CheckpointError) return { code: error.code, message: error.message, context: error.context };
  return { message: error instanceof Error ? error.message : String(error) };
}

export function errorFromWire(wire: WireError): Error {
  return wire.code === undefined
    ? new Error(wire.message)
    : new CheckpointError(wire.code, wire.message, { context: wire.context ?? {} });
}
