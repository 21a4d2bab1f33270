import type { BenchResult } from "./report.js";
import type { BenchRun } from "./runner.js";
import { formatNumber, markdownTable, ratioTable } from "./table.js";

export const START =
  "<!-- bench:generated:start — `pnpm bench:docs` writes from here to the end marker, from bench-results/latest.json; edit around it -->";
export const END = "<!-- bench:generated:end -->";

/** Extra figures worth a glance in the docs: ranges as `a–b`, plain numbers and strings; per-round lists stay in the JSON. */
function details(extra: BenchResult["extra"]): string {
  if (!extra) return "";
  const parts: string[] = [];
  for (const [key, value] of Object.entries(extra)) {
    if (typeof value === "number") parts.push(`${key} ${formatNumber(value)}`);
    else if (typeof value === "string") parts.push(`${key} ${value}`);
    else if (key.endsWith("Range") && value.length === 2)
      parts.push(`${key.slice(0, -"Range".length)} ${formatNumber(value[0]!)}–${formatNumber(value[1]!)}`);
  }
  return parts.join("; ");
}

function suiteTable(results: readonly BenchResult[]): string {
  return markdownTable(
    ["what", "Cairn", "against", "ratio", "details"],
    results.map((r) => [
      r.name,
      `${formatNumber(r.value)} ${r.unit}`,
      r.baseline?.name ?? "—",
      r.ratio === undefined ? "—" : `${r.ratio.toFixed(2)}×`,
      details(r.extra),
    ]),
  );
}

/** The generated part of docs/benchmarks.md: the machine, one table of ratios, then every figure by suite. */
export function renderSection(run: BenchRun): string {
  const m = run.machine;
  const lines = [
    START,
    "",
    "## Latest run",
    "",
    `${run.quick ? "A quick (smoke) run, small sizes, one round: not figures to quote. " : ""}Written ${run.date.slice(0, 16).replace("T", " ")} UTC.`,
    `Machine: ${m.cpu}, ${m.cores} cores, ${m.ramGiB} GiB RAM, Linux ${m.kernel}, Node ${m.node}.`,
  ];
  if (m.loadAverage !== undefined)
    lines.push(`Load average when the run started: ${m.loadAverage} (other work on the machine skews every figure).`);
  if (m.disk) {
    lines.push(
      `Disk, measured in the same run on ${formatNumber(m.disk.bytes / 2 ** 20)} MiB of random bytes: direct write + fsync ${formatNumber(m.disk.directWriteFsync)} MiB/s, cold read ${formatNumber(m.disk.coldRead)} MiB/s, warm read ${formatNumber(m.disk.warmRead)} MiB/s (\`dd bs=16M\`).`,
    );
  }
  lines.push(
    "",
    "Suites:",
    "",
    ...run.suites.map(
      (s) =>
        `- \`${s.suite}\`: ${s.date.slice(0, 16).replace("T", " ")} UTC, ${formatNumber(s.seconds)} s${s.ok ? "" : `, **failed** (${s.error})`}`,
    ),
  );
  const compared = run.results.filter((r) => r.ratio !== undefined);
  lines.push(
    "",
    "### Ratios",
    "",
    "Each figure against its baseline, measured in the same run on the same bytes and disk.",
    "",
    ratioTable(compared),
  );
  for (const suite of [...new Set(run.results.map((r) => r.suite))]) {
    lines.push("", `### \`${suite}\``, "", suiteTable(run.results.filter((r) => r.suite === suite)));
  }
  lines.push("", END);
  return lines.join("\n");
}

/** `markdown` with its generated section replaced (or appended, if it has none yet). */
export function replaceSection(markdown: string, section: string): string {
  const start = markdown.indexOf("<!-- bench:generated:start");
  const end = markdown.indexOf(END);
  if (start === -1 || end === -1 || end < start) return `${markdown.trimEnd()}\n\n${section}\n`;
  return `${markdown.slice(0, start)}${section}${markdown.slice(end + END.length)}`;
}
