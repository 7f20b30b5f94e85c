// Records how long each phase of a scenario takes, into the file global-setup prints at the end.
import { appendFileSync } from 'node:fs';
import { inject } from 'vitest';
import type { PhaseRecord } from './phase-table.ts';

/** Runs `body` as a named phase of `scenario` and records how long it took, also when it fails. */
export async function phase<T>(scenario: string, name: string, body: () => Promise<T>): Promise<T> {
  const t0 = performance.now();
  let ok = false;
  try {
    const value = await body();
    ok = true;
    return value;
  } finally {
    const record: PhaseRecord = { scenario, phase: name, ms: Math.round(performance.now() - t0), ok };
    appendFileSync(inject('phasesFile'), `${JSON.stringify(record)}\n`);
  }
}
