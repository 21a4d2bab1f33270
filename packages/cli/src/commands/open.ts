import type { CheckpointMetadata } from "@cairn/core";
import type { CommandContext } from "../command.js";
import {
  type Location,
  checkpointMetadata,
  openCheckpointLocation,
  openFileLocation,
  openLocation,
} from "../location.js";

/** Runs `use` with a location opened for the command, closed afterwards whatever happens. */
export async function withLocation<T>(
  context: CommandContext,
  url: string,
  use: (location: Location) => Promise<T>,
): Promise<T> {
  const location = await openLocation(url, context.storageOptions);
  try {
    return await use(location);
  } finally {
    await location.close();
  }
}

export async function withFile<T>(
  context: CommandContext,
  url: string,
  use: (location: Location & { name: string }) => Promise<T>,
): Promise<T> {
  const location = await openFileLocation(url, context.storageOptions);
  try {
    return await use(location);
  } finally {
    await location.close();
  }
}

/** Runs `use` with a checkpoint's location (rooted at its parent: see `openCheckpointLocation`), closed afterwards. */
export async function withCheckpointLocation<T>(
  context: CommandContext,
  url: string,
  use: (location: Location) => Promise<T>,
): Promise<T> {
  const location = await openCheckpointLocation(url, context.storageOptions);
  try {
    return await use(location);
  } finally {
    await location.close();
  }
}

/** Runs `use` with a committed checkpoint's location and metadata. */
export function withCheckpoint<T>(
  context: CommandContext,
  url: string,
  use: (location: Location, metadata: CheckpointMetadata) => Promise<T>,
): Promise<T> {
  return withCheckpointLocation(context, url, async (location) =>
    use(location, await checkpointMetadata(location, context.signal)),
  );
}

/** Text for a result: the data files of a replaced checkpoint that could not be deleted, if any. */
export function leftNote(files: readonly string[]): string {
  return files.length === 0
    ? ""
    : `; the replaced checkpoint's data files ${files.join(", ")} could not be deleted (nothing refers to them: delete them when convenient)`;
}

/** Rows as aligned columns, the first row a header. */
export function table(rows: readonly (readonly string[])[]): string {
  const widths = rows[0]!.map((_, c) => rows.reduce((width, r) => Math.max(width, (r[c] ?? "").length), 0));
  return rows
    .map((r) =>
      r
        .map((cell, c) => (c === r.length - 1 ? cell : cell.padEnd(widths[c]!)))
        .join("  ")
        .trimEnd(),
    )
    .join("\n");
}
