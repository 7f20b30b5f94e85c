// Phase timings of the conformance suite, formatted as one table for the end of the run.

export interface PhaseRecord {
  scenario: string;
  phase: string;
  ms: number;
  ok: boolean;
}

export function formatPhaseTable(records: readonly PhaseRecord[]): string {
  if (records.length === 0) return 'Ironic conformance: no phase recorded';
  const rows = records.map((r) => [r.scenario, r.phase, `${(r.ms / 1000).toFixed(1)} s`, r.ok ? 'ok' : 'FAILED']);
  const header = ['scenario', 'phase', 'duration', 'result'];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const line = (cells: string[]) =>
    cells.map((c, i) => (i === 2 ? c.padStart(widths[i]!) : c.padEnd(widths[i]!))).join('  ');
  const total = records.reduce((s, r) => s + r.ms, 0);
  return [
    'Ironic conformance: phase durations',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...rows.map(line),
    `total ${(total / 1000).toFixed(1)} s`,
  ].join('\n');
}
