import { parseStep } from "@cairn/manager";
import { HTTP_INDEX_FILE, publishStep } from "@cairn/storage-http";
import { UsageError, type CommandSpec } from "../command.js";

export const publishCommand: CommandSpec = {
  name: "publish",
  args: "<root> <step>",
  summary: `add a committed step to the root's ${HTTP_INDEX_FILE}, so the root can be served over https://`,
  help: [
    `HTTP cannot list a directory, so a root copied to a static web server or CDN is listed through ${HTTP_INDEX_FILE}, which this writes at the root: the step's metadata.json and data files (and, for an incremental step, the files it references) with their sizes, added to what the index already lists. Publish every step to serve, then copy the root (index included) to the server; a manager or load then reads it as https://host/path/to/root.`,
    "The step must be committed; the index is the only file written.",
  ],
  minArgs: 2,
  maxArgs: 2,
  async run(context, [root, stepArg]) {
    const step = parseStep(stepArg!);
    if (step === undefined)
      throw new UsageError(`a step is a non-negative decimal integer, got ${JSON.stringify(stepArg)}`);
    const published = await publishStep(root!, step, context.signal);
    context.result(
      { root, step, index: published.index, objects: published.objects, stepObjects: published.stepObjects },
      `published step ${step} of ${root}: ${published.stepObjects} files; ${published.index} lists ${published.objects}`,
    );
  },
};
