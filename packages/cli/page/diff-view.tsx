// The diff of two steps: what changed, by how much; identical entries counted, listed on request.
import { useState } from "preact/hooks";
import type { DiffResponse, EntryDiff } from "../src/ui/ui-types.js";
import { useGet } from "./api.js";
import { formatMetric, formatShape } from "./format.js";

function change(e: EntryDiff): string {
  if (e.before)
    return `${e.before.dtype ?? e.before.kind} ${formatShape(e.before.shape)} → ${e.dtype ?? e.kind} ${formatShape(e.shape)}`;
  if (e.values) return `${JSON.stringify(e.values.a)} → ${JSON.stringify(e.values.b)}`;
  if (e.status === "added" || e.status === "removed") return `${e.dtype ?? e.kind} ${formatShape(e.shape)}`;
  if (e.status === "identical") return `identical by ${e.by ?? "value"}`;
  if (e.changedElements === undefined) return "";
  return `${e.changedElements} of ${e.elements} elements`;
}

function figure(value: number | null | undefined): string {
  return value === null || value === undefined ? "–" : formatMetric(value);
}

export function DiffView({ a, b }: { a: number; b: number }) {
  const { data: diff, failure } = useGet<DiffResponse>("api/diff", { a, b });
  const [all, setAll] = useState(false);

  const shown = diff?.entries.filter((e) => all || e.status !== "identical") ?? [];
  return (
    <section id="diff" data-a={a} data-b={b}>
      <h2>
        Diff of step {a} → step {b}
      </h2>
      {failure ? <p class="error-text">{failure}</p> : null}
      {!diff && !failure ? <p class="loading">comparing…</p> : null}
      {diff ? (
        <>
          <p class="summary">
            {diff.changed} changed, {diff.added} added, {diff.removed} removed, {diff.identical} identical{" "}
            <label>
              <input type="checkbox" checked={all} onChange={() => setAll(!all)} /> show identical
            </label>
          </p>
          <table id="diff-entries">
            <thead>
              <tr>
                <th>key</th>
                <th>status</th>
                <th>change</th>
                <th>max abs change</th>
                <th>max rel change</th>
                <th>to/from NaN or Inf</th>
              </tr>
            </thead>
            <tbody>
              {shown.map((e) => (
                <tr key={JSON.stringify(e.key)} data-key={e.name} data-status={e.status} class={e.status}>
                  <td class="key">
                    <code>{e.name}</code>
                  </td>
                  <td>{e.status}</td>
                  <td>{change(e)}</td>
                  <td class="num">{figure(e.maxAbsChange)}</td>
                  <td class="num">{figure(e.maxRelChange)}</td>
                  <td class="num">{e.nonFiniteChanges ? e.nonFiniteChanges : "–"}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </>
      ) : null}
    </section>
  );
}
