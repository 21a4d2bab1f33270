// The bundle suite's entry for @cairn/storage-browser: everything it exports, and what it imports of core.
export * from "@cairn/storage-browser";
