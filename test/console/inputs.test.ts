import { mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { countLines, readNics, readStatus, tailLines } from '../../agent/console/inputs.ts';

let dir: string;
beforeEach(() => {
  dir = mkdtempSync(join(tmpdir(), 'ina-console-'));
});
afterEach(() => rmSync(dir, { recursive: true, force: true }));

describe('console inputs', () => {
  it('reads a status file and refuses malformed or missing ones', async () => {
    const good = { written_at: 1, status: { startedAt: 1, version: 'v', phase: 'serving' }, commands: [] };
    writeFileSync(join(dir, 's.json'), JSON.stringify(good));
    expect(await readStatus(join(dir, 's.json'))).toEqual(good);
    writeFileSync(join(dir, 'half.json'), '{"written_at": 1, "sta');
    expect(await readStatus(join(dir, 'half.json'))).toBeNull();
    writeFileSync(join(dir, 'shape.json'), '{"status": 3, "commands": []}');
    expect(await readStatus(join(dir, 'shape.json'))).toBeNull();
    expect(await readStatus(join(dir, 'none.json'))).toBeNull();
  });

  it('tails the last lines of a log, dropping a partial first line when it reads only the end', async () => {
    const path = join(dir, 'agent.log');
    writeFileSync(path, `${Array.from({ length: 1000 }, (_, i) => `line-${i}`).join('\n')}\n`);
    expect(await tailLines(path, 3)).toEqual(['line-997', 'line-998', 'line-999']);
    const small = await tailLines(path, 1000, 100);
    expect(small.at(-1)).toBe('line-999');
    expect(small.every((l) => /^line-\d+$/.test(l))).toBe(true);
    expect(small.length).toBeLessThan(15);
    expect(await tailLines(join(dir, 'missing.log'), 5)).toEqual([]);
  });

  it('counts agent starts', async () => {
    writeFileSync(join(dir, 'starts'), 'x\nx\nx\n');
    expect(await countLines(join(dir, 'starts'))).toBe(3);
    expect(await countLines(join(dir, 'nope'))).toBe(0);
  });

  it('lists NICs from a sysfs-like folder, without lo', async () => {
    const net = join(dir, 'net');
    for (const [name, mac] of [
      ['lo', '00:00:00:00:00:00'],
      ['eth1', '52:54:00:00:00:02'],
      ['eth0', '52:54:00:00:00:01'],
    ]) {
      const d = join(net, name!);
      mkdirSync(d, { recursive: true });
      writeFileSync(join(d, 'address'), `${mac}\n`);
    }
    const nics = await readNics(net);
    expect(nics.map((n) => [n.name, n.mac])).toEqual([
      ['eth0', '52:54:00:00:00:01'],
      ['eth1', '52:54:00:00:00:02'],
    ]);
  });
});
