import { randomFillSync } from "node:crypto";
import { type HostTensor, hostTensor } from "@cairn/core";
import { crc32c } from "@cairn/core/format";
import { MiB } from "../support.js";

/**
 * A state dict's shape, shared by the Node and Python phases so both build the same tensors:
 * `big` float32 tensors `big.<i>` of `bigBytes` each, and `small` ones `small.<i>` of `smallBytes`.
 */
export interface StateSpec {
  readonly big: number;
  readonly bigBytes: number;
  readonly small: number;
  readonly smallBytes: number;
}

/** Bytes of tensor data in a state built from `spec`. */
export function stateBytes(spec: StateSpec): number {
  return spec.big * spec.bigBytes + spec.small * spec.smallBytes;
}

/** `big` tensors of `bigMiB`, plus `small` tensors sharing `smallMiB` (float32: sizes rounded down to 4 bytes). */
export function stateSpec(big: number, bigMiB: number, small = 0, smallMiB = 0): StateSpec {
  return {
    big,
    bigBytes: bigMiB * MiB,
    small,
    smallBytes: small === 0 ? 0 : Math.floor((smallMiB * MiB) / small / 4) * 4,
  };
}

export function describeState(spec: StateSpec): string {
  const mib = (b: number): string => `${+(b / MiB).toFixed(1)} MiB`;
  const parts = [`${spec.big} x ${mib(spec.bigBytes)}`];
  if (spec.small > 0) parts.push(`${spec.small.toLocaleString("en-US")} small`);
  return `${mib(stateBytes(spec))} (${parts.join(" + ")})`;
}

/**
 * The state dict as host tensors: random bytes to be saved (`fill`), or zeroed destinations to
 * load into, every page touched, as a model's parameters would be.
 */
export function buildState(spec: StateSpec, fill: boolean): Record<string, HostTensor> {
  const sd: Record<string, HostTensor> = {};
  const make = (name: string, bytes: number): void => {
    const t = hostTensor("float32", [bytes / 4]);
    const view = new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
    for (let at = 0; at < view.byteLength; at += 64 * MiB) {
      const part = view.subarray(at, Math.min(view.byteLength, at + 64 * MiB));
      if (fill) randomFillSync(part);
      else part.fill(0);
    }
    sd[name] = t;
  };
  for (let i = 0; i < spec.big; i++) make(`big.${i}`, spec.bigBytes);
  for (let i = 0; i < spec.small; i++) make(`small.${i}`, spec.smallBytes);
  return sd;
}

/** A tensor's bytes. */
export function bytesOf(t: HostTensor): Uint8Array {
  return new Uint8Array(t.data.buffer, t.data.byteOffset, t.data.byteLength);
}

/**
 * Seconds one thread takes to CRC32C every byte of `sd` in 1 MiB blocks, as a load verifies
 * them: the limit of a verified load, whose targets only the calling thread can read.
 */
export function crcSecondsOf(sd: Record<string, HostTensor>): number {
  const started = performance.now();
  for (const t of Object.values(sd)) {
    const bytes = bytesOf(t);
    for (let at = 0; at < bytes.byteLength; at += MiB) crc32c(bytes.subarray(at, at + MiB));
  }
  return (performance.now() - started) / 1000;
}
