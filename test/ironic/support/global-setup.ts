// Gives every test file one file to append phase timings to, and prints them as a table at the end;
// stops any Ironic or agent a dead worker left running.
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { TestProject } from 'vitest/node';
import { leftoversFileIn, stopLeftovers } from './leftovers.ts';
import { formatPhaseTable, type PhaseRecord } from './phase-table.ts';

declare module 'vitest' {
  export interface ProvidedContext {
    phasesFile: string;
    leftoversFile: string;
  }
}

export default function setup(project: TestProject): () => void {
  const dir = mkdtempSync(join(tmpdir(), 'ina-ironic-suite-'));
  const file = join(dir, 'phases.jsonl');
  project.provide('phasesFile', file);
  const leftovers = leftoversFileIn(dir);
  project.provide('leftoversFile', leftovers);
  return () => {
    for (const what of stopLeftovers(leftovers)) process.stdout.write(`stopped a leftover: ${what}\n`);
    let text = '';
    try {
      text = readFileSync(file, 'utf8');
    } catch {
      // no phase was recorded
    }
    const records = text
      .split('\n')
      .filter((l) => l !== '')
      .map((l) => JSON.parse(l) as PhaseRecord);
    process.stdout.write(`\n${formatPhaseTable(records)}\n`);
    rmSync(dir, { recursive: true, force: true });
  };
}
