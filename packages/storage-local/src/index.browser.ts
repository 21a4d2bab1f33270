// @cairn/storage-local in a browser: neither file:// (no file system) nor memory:// (memfs needs
// Node's modules) exists there; opening one says what to use instead, rather than "install me".
import { CheckpointError, registerStorage } from "@cairn/core";
import type { StorageFactory } from "@cairn/core/storage";

function unavailable(protocol: string): StorageFactory {
  return () => {
    throw new CheckpointError(
      "unsupported_protocol",
      `[${protocol}] ${protocol}:// storage needs Node; in a browser use opfs:// or idb:// (import "@cairn/storage-browser") or https://`,
      { context: { protocol } },
    );
  };
}

registerStorage("file", unavailable("file"));
registerStorage("memory", unavailable("memory"));
