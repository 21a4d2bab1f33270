// The bundle suite's entry for what a page checkpointing to OPFS ships: core, manager and storage-browser.
export * as core from "@cairn/core";
export * as manager from "@cairn/manager";
export * as storageBrowser from "@cairn/storage-browser";
