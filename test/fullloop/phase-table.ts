// The full loop's phase table: printed at the end of the run and written next to the report.
export interface Phase {
  firmware: string;
  phase: string;
  ms: number;
}

export function formatPhases(rows: readonly Phase[]): string {
  const cells = rows.map((r) => [r.firmware, r.phase, `${(r.ms / 1000).toFixed(1)} s`]);
  const header = ['firmware', 'phase', 'duration'];
  const widths = header.map((h, i) => Math.max(h.length, ...cells.map((c) => c[i]!.length)));
  const line = (c: string[]) => c.map((x, i) => (i === 2 ? x.padStart(widths[i]!) : x.padEnd(widths[i]!))).join('  ');
  const totals = [...new Set(rows.map((r) => r.firmware))].map(
    (f) => `${f} total ${(rows.filter((r) => r.firmware === f).reduce((s, r) => s + r.ms, 0) / 1000).toFixed(1)} s`,
  );
  return [
    'Full loop: phase durations',
    line(header),
    line(widths.map((w) => '-'.repeat(w))),
    ...cells.map(line),
    ...totals,
  ].join('\n');
}
