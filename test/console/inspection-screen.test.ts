// The console's status page during and after inspection.
import { describe, expect, it } from 'vitest';
import { renderStatus } from '../../agent/console/screen.ts';

describe('console status page', () => {
  it('shows the inspection result and the inventory summary with its collection time', () => {
    const lines = renderStatus(
      {
        now: 1000,
        status: {
          written_at: 1000,
          commands: [],
          status: {
            startedAt: 990,
            version: '0.1.0',
            phase: 'heartbeating',
            inspection: {
              phase: 'done',
              summary: '2 CPU x86_64, 2048 MiB, 2 disks, 2 NICs, QEMU Standard PC',
              collectionMs: 412,
              result: 'HTTP 202, node 5e1c…',
              at: 995,
            },
          },
        },
        nics: [],
        disks: [],
        logLines: [],
        agentStarts: 1,
        shellAllowed: false,
      },
      { width: 100, height: 24 },
    );
    expect(lines).toContain('Inspection  done: HTTP 202, node 5e1c…'.padEnd(0));
    expect(lines.find((l) => l.startsWith('Inventory'))).toBe(
      'Inventory   collected in 412 ms: 2 CPU x86_64, 2048 MiB, 2 disks, 2 NICs, QEMU Standard PC',
    );
  });
});
