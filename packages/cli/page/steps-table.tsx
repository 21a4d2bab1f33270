// The steps of the run: one row each, newest first, the newest verified one marked.
import type { StepRow, StepsResponse } from "../src/ui/ui-types.js";
import { formatBytes, formatMetric, formatSeconds, formatTime } from "./format.js";

export interface StepsTableProps {
  readonly run: StepsResponse;
  readonly selected: number | null;
  readonly diff: { readonly a: number | null; readonly b: number | null };
  onSelect(step: number): void;
  onDiffSide(side: "a" | "b", step: number): void;
}

function verified(row: StepRow) {
  const v = row.verification;
  if (!v) return <td class="verified">–</td>;
  return (
    <td class={`verified ${v.ok ? "ok" : "bad"}`} title={`verified on tier ${v.tier} at ${formatTime(v.at)}`}>
      {v.ok ? "✓ verified" : `✗ ${v.damaged} problem${v.damaged === 1 ? "" : "s"}`}
    </td>
  );
}

export function StepsTable({ run, selected, diff, onSelect, onDiffSide }: StepsTableProps) {
  const tiered = run.tiers.length > 1;
  return (
    <section id="steps-section">
      <h2>Steps</h2>
      <div class="scroll">
        <table id="steps">
          <thead>
            <tr>
              <th>step</th>
              {tiered ? run.tiers.map((t, i) => <th title={t}>tier {i}</th>) : <th>state</th>}
              <th>written</th>
              <th>referenced</th>
              <th>time</th>
              <th>save</th>
              {run.metrics.length > 0 ? run.metrics.map((m) => <th class="metric">{m}</th>) : <th>metrics</th>}
              <th>verified</th>
              <th title="the two steps to compare">diff a / b</th>
            </tr>
          </thead>
          <tbody>
            {run.steps.toReversed().map((row) => {
              const newest = row.step === run.newestVerified;
              const classes = [row.state, newest ? "newest-verified" : "", row.step === selected ? "selected" : ""];
              return (
                <tr
                  key={row.step}
                  data-step={row.step}
                  class={classes.join(" ").trim()}
                  onClick={() => onSelect(row.step)}
                >
                  <td class="step">
                    {row.step}
                    {newest ? <span class="badge">newest verified</span> : null}
                  </td>
                  {tiered ? (
                    row.tiers.map((state) => <td class={`state ${state ?? "absent"}`}>{state ?? "–"}</td>)
                  ) : (
                    <td class={`state ${row.state}`}>{row.state}</td>
                  )}
                  <td class="num">{formatBytes(row.bytes)}</td>
                  <td class="num">{row.referencedBytes === null ? "–" : formatBytes(row.referencedBytes)}</td>
                  <td>{formatTime(row.time)}</td>
                  <td class="num">{row.saveSeconds === null ? "–" : formatSeconds(row.saveSeconds)}</td>
                  {row.error ? (
                    <td class="error-text" colSpan={run.metrics.length || 1}>
                      {row.error.message}
                    </td>
                  ) : run.metrics.length > 0 ? (
                    run.metrics.map((m) => (
                      <td class="num">{row.metrics[m] === undefined ? "–" : formatMetric(row.metrics[m]!)}</td>
                    ))
                  ) : (
                    <td>–</td>
                  )}
                  {verified(row)}
                  <td class="pick" onClick={(e) => e.stopPropagation()}>
                    {row.state === "committed"
                      ? (["a", "b"] as const).map((side) => (
                          <input
                            type="radio"
                            name={`diff-${side}`}
                            aria-label={`diff ${side}: step ${row.step}`}
                            checked={diff[side] === row.step}
                            onChange={() => onDiffSide(side, row.step)}
                          />
                        ))
                      : null}
                  </td>
                </tr>
              );
            })}
          </tbody>
        </table>
      </div>
    </section>
  );
}
