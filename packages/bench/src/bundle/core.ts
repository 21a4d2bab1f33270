// The bundle suite's entry for @cairn/core: everything the package exports.
export * from "@cairn/core";
