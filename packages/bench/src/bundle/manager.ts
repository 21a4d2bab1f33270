// The bundle suite's entry for @cairn/manager: everything the package exports, and what it imports.
export * from "@cairn/manager";
