// One step: its entries (key, dtype, shape, chunks, files), each tensor's statistics on demand, and verify.
import { useEffect, useState } from "preact/hooks";
import type { InspectedEntry, StatsResponse, StepResponse, TensorStats } from "../src/ui/ui-types.js";
import { get, useGet } from "./api.js";
import { formatBytes, formatMetric, formatShape } from "./format.js";
import { Histogram } from "./histogram.js";
import { VerifyPanel } from "./verify-panel.js";

type Stats = TensorStats | { readonly error: string } | "loading";

function figure(value: number | null): string {
  return value === null ? "–" : formatMetric(value);
}

function StatsCell({ stats, onAsk }: { stats: Stats | undefined; onAsk(): void }) {
  if (stats === undefined)
    return (
      <td class="stats">
        <button type="button" onClick={onAsk}>
          stats
        </button>
      </td>
    );
  if (stats === "loading") return <td class="stats">reading…</td>;
  if ("error" in stats) return <td class="stats error-text">{stats.error}</td>;
  const inf = stats.posInf + stats.negInf;
  return (
    <td class="stats">
      <span class="figures">
        min {figure(stats.min)} · max {figure(stats.max)} · mean {figure(stats.mean)} · std {figure(stats.std)}
      </span>
      {stats.nan > 0 ? <span class="flag nan">NaN ×{stats.nan}</span> : null}
      {inf > 0 ? <span class="flag inf">Inf ×{inf}</span> : null}
      {stats.histogram ? <Histogram histogram={stats.histogram} /> : null}
    </td>
  );
}

function keyId(entry: InspectedEntry): string {
  return JSON.stringify(entry.key);
}

export function StepView({ step, tier, onVerified }: { step: number; tier: number | undefined; onVerified(): void }) {
  const { data: detail, failure } = useGet<StepResponse>("api/step", { step, tier });
  const [stats, setStats] = useState<Record<string, Stats>>({});
  useEffect(() => setStats({}), [step, tier]);

  const ask = async (entry: InspectedEntry) => {
    const id = keyId(entry);
    setStats((s) => ({ ...s, [id]: "loading" }));
    try {
      const answer = await get<StatsResponse>("api/stats", {
        step,
        tier: detail?.tier,
        key: JSON.stringify(entry.key),
      });
      setStats((s) => ({ ...s, [id]: answer.stats }));
    } catch (error) {
      setStats((s) => ({ ...s, [id]: { error: error instanceof Error ? error.message : String(error) } }));
    }
  };

  const askAll = async () => {
    for (const entry of detail?.summary.entries ?? [])
      if (entry.kind === "tensor" && stats[keyId(entry)] === undefined) await ask(entry);
  };

  if (failure)
    return (
      <section id="step" data-step={step}>
        <h2>Step {step}</h2>
        <p class="error-text">{failure}</p>
        <VerifyPanel step={step} tier={tier ?? 0} onVerified={onVerified} />
      </section>
    );
  if (!detail)
    return (
      <section id="step">
        <h2>Step {step}</h2>
        <p class="loading">loading…</p>
      </section>
    );
  const { summary } = detail;
  return (
    <section id="step" data-step={step}>
      <h2>
        Step {step} <span class="where">{detail.where}</span>
      </h2>
      <p class="summary">
        {summary.format} {summary.version}, {summary.worldSize} rank{summary.worldSize === 1 ? "" : "s"},{" "}
        {summary.entries.length} entries, {summary.files.length} data files, {formatBytes(summary.bytes)}, committed{" "}
        {summary.createdAt}
      </p>
      <VerifyPanel step={step} tier={detail.tier} onVerified={onVerified} />
      <p>
        <button type="button" onClick={askAll}>
          statistics of every tensor
        </button>
      </p>
      <table id="entries">
        <thead>
          <tr>
            <th>key</th>
            <th>kind</th>
            <th>dtype</th>
            <th>shape</th>
            <th>chunks</th>
            <th>files</th>
            <th>statistics / value</th>
          </tr>
        </thead>
        <tbody>
          {summary.entries.map((entry) => {
            const s = stats[keyId(entry)];
            const flagged = s !== undefined && s !== "loading" && !("error" in s) && s.nan + s.posInf + s.negInf > 0;
            return (
              <tr key={keyId(entry)} data-key={entry.name} class={flagged ? "nonfinite" : undefined}>
                <td class="key">
                  <code>{entry.name}</code>
                </td>
                <td>{entry.kind}</td>
                {"value" in entry ? (
                  <>
                    <td colSpan={4} />
                    <td class="value">
                      <code>
                        {"special" in entry && entry.special !== undefined
                          ? entry.special
                          : JSON.stringify(entry.value)}
                      </code>
                    </td>
                  </>
                ) : (
                  <>
                    <td>{entry.dtype}</td>
                    <td>{formatShape(entry.shape)}</td>
                    <td class="num">{entry.chunks.length}</td>
                    <td class="files" title={entry.files.join("\n")}>
                      {entry.files.length === 1 ? entry.files[0] : `${entry.files.length} files`}
                    </td>
                    {entry.kind === "tensor" ? <StatsCell stats={s} onAsk={() => ask(entry)} /> : <td />}
                  </>
                )}
              </tr>
            );
          })}
        </tbody>
      </table>
    </section>
  );
}
