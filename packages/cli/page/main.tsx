// The `cairn ui` page: a run's steps, curves, a step's entries and statistics, diffs and verify,
// read from the server that served it. Every stored name is rendered as text (Preact escapes it).
import "uplot/dist/uPlot.min.css";
import "./page.css";
import { render } from "preact";
import { useCallback, useEffect, useMemo, useState } from "preact/hooks";
import type { StepsResponse } from "../src/ui/ui-types.js";
import { poller } from "./api.js";
import { Curves } from "./curves.js";
import { DiffView } from "./diff-view.js";
import { formatTime } from "./format.js";
import { StepView } from "./step-view.js";
import { StepsTable } from "./steps-table.js";

/** What the page shows, kept in the URL's hash so a reload or a shared link shows the same: #step=200&a=100&b=200. */
interface View {
  readonly step: number | null;
  readonly a: number | null;
  readonly b: number | null;
}

function readHash(): View {
  const params = new URLSearchParams(location.hash.slice(1));
  const number = (name: string) => {
    const value = params.get(name);
    return value !== null && /^\d+$/.test(value) ? Number(value) : null;
  };
  return { step: number("step"), a: number("a"), b: number("b") };
}

function writeHash(view: View): void {
  const params = new URLSearchParams();
  for (const [name, value] of Object.entries(view)) if (value !== null) params.set(name, String(value));
  history.replaceState(null, "", `#${params.toString()}`);
}

function App() {
  const [run, setRun] = useState<StepsResponse | null>(null);
  const [failure, setFailure] = useState<string | null>(null);
  const [checkedAt, setCheckedAt] = useState<string | null>(null);
  const [view, setView] = useState<View>(readHash);
  const [compared, setCompared] = useState<{ a: number; b: number } | null>(() => {
    const v = readHash();
    return v.a !== null && v.b !== null ? { a: v.a, b: v.b } : null;
  });
  const poll = useMemo(() => poller<StepsResponse>("api/steps"), []);

  const refresh = useCallback(async () => {
    try {
      const next = await poll();
      if (next) setRun(next);
      setCheckedAt(new Date().toISOString());
      setFailure(null);
    } catch (error) {
      setFailure(error instanceof Error ? error.message : String(error));
    }
  }, [poll]);

  useEffect(() => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    let stopped = false;
    const loop = async () => {
      await refresh();
      if (!stopped) timer = setTimeout(loop, run?.refreshMs ?? 2000);
    };
    void loop();
    return () => {
      stopped = true;
      clearTimeout(timer);
    };
  }, [refresh, run?.refreshMs]);

  const update = (next: Partial<View>) => {
    const merged = { ...view, ...next };
    setView(merged);
    writeHash(merged);
  };

  const committed = run?.steps.filter((s) => s.state === "committed").map((s) => s.step) ?? [];
  const a = view.a ?? committed.at(-2) ?? null;
  const b = view.b ?? committed.at(-1) ?? null;
  const selectedRow = run?.steps.find((s) => s.step === view.step);

  return (
    <main>
      <header>
        <h1>cairn ui</h1>
        <p class="tiers">
          {run?.tiers.map((t, i) => (
            <span class="tier">
              {run.tiers.length > 1 ? `tier ${i}: ` : ""}
              <code>{t}</code>
            </span>
          ))}
        </p>
        <p class="status">
          {run ? `${run.steps.length} steps, listed ${formatTime(checkedAt)}` : "listing…"}
          {failure ? <span class="error-text"> · {failure}</span> : null}
        </p>
      </header>
      {run ? <Curves run={run} /> : null}
      {run ? (
        <StepsTable
          run={run}
          selected={view.step}
          diff={{ a, b }}
          onSelect={(step) => update({ step })}
          onDiffSide={(side, step) => update({ [side]: step })}
        />
      ) : null}
      {view.step !== null ? <StepView step={view.step} tier={selectedRow?.tier} onVerified={refresh} /> : null}
      <section id="diff-controls">
        <button
          type="button"
          disabled={a === null || b === null || a === b}
          onClick={() => a !== null && b !== null && setCompared({ a, b })}
        >
          compare step {a ?? "?"} with step {b ?? "?"}
        </button>
      </section>
      {compared ? <DiffView a={compared.a} b={compared.b} /> : null}
    </main>
  );
}

const app = document.getElementById("app")!;
app.textContent = "";
render(<App />, app);
