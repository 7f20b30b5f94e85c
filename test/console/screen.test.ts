import { describe, expect, it } from 'vitest';
import {
  commandsBody,
  currentCommand,
  formatAge,
  formatBytes,
  formatLogLine,
  renderPage,
  renderStatus,
  type ConsoleInput,
} from '../../agent/console/screen.ts';
import type { StatusFile } from '../../agent/status-file.ts';

const NOW = 1_800_000_100;
const SIZE = { width: 80, height: 24 };

function status(patch: Partial<StatusFile['status']> = {}, commands: StatusFile['commands'] = []): StatusFile {
  return {
    written_at: NOW,
    status: { startedAt: NOW - 100, version: '0.1.0', phase: 'heartbeating', ...patch },
    commands,
  };
}

function input(patch: Partial<ConsoleInput> = {}): ConsoleInput {
  return {
    now: NOW,
    status: status({
      conductorUrl: 'http://10.0.2.100:6385',
      node: {
        uuid: '1be26c0b-03f2-4d2e-ae87-c02d7f33c123',
        properties: {},
        instance_info: {},
        driver_internal_info: {},
      },
      callbackUrl: 'http://127.0.0.1:40123',
      lastHeartbeat: { at: NOW - 7, ok: true, status: '202 Accepted' },
    }),
    nics: [{ name: 'eth0', mac: '52:54:00:12:34:56', addresses: ['10.0.2.15/24'] }],
    disks: [{ name: 'vda', bytes: 64 * 1024 * 1024, type: 'disk', model: 'QEMU disk' }],
    logLines: [],
    agentStarts: 1,
    shellAllowed: false,
    ...patch,
  };
}

describe('renderStatus', () => {
  it('shows node, conductor, heartbeat, NICs and disks, and fills the screen exactly', () => {
    const lines = renderStatus(input(), SIZE);
    const text = lines.join('\n');
    expect(lines).toHaveLength(24);
    expect(lines.every((l) => l.length <= 80)).toBe(true);
    expect(text).toContain('1be26c0b-03f2-4d2e-ae87-c02d7f33c123');
    expect(text).toContain('http://10.0.2.100:6385');
    expect(text).toMatch(/Heartbeat\s+\d\d:\d\d:\d\d \(7 s ago\) ok: 202 Accepted/);
    expect(text).toContain('eth0 52:54:00:12:34:56 10.0.2.15/24');
    expect(text).toContain('vda 64.0 MiB disk QEMU disk');
    expect(lines.at(-1)).toBe('[l] full log  [c] commands');
  });

  it('offers the shell key only when allowed', () => {
    expect(renderStatus(input({ shellAllowed: true }), SIZE).at(-1)).toContain('[s] shell');
    expect(renderStatus(input(), SIZE).at(-1)).not.toContain('shell');
  });

  it('says so when the agent has written no status and counts restarts', () => {
    expect(renderStatus(input({ status: null }), SIZE).join('\n')).toContain('no status yet');
    expect(renderStatus(input({ agentStarts: 3 }), SIZE).join('\n')).toContain('restarted 2x');
  });

  it('shows the running command with its progress, or the last one with its error', () => {
    const running = status({}, [
      {
        id: 'a',
        name: 'deploy.execute_deploy_step',
        status: 'RUNNING',
        started_at: NOW - 12,
        result: { written: 1048576 },
        error: null,
      },
    ]);
    const t1 = renderStatus(input({ status: running }), SIZE).join('\n');
    expect(t1).toMatch(/Command\s+deploy.execute_deploy_step RUNNING 12 s/);
    expect(t1).toMatch(/Progress\s+\{"written":1048576\}/);
    const failed = status({}, [
      {
        id: 'b',
        name: 'standby.power_off',
        status: 'FAILED',
        started_at: NOW - 5,
        finished_at: NOW - 4,
        result: null,
        error: { type: 'SystemRebootError' },
      },
    ]);
    expect(renderStatus(input({ status: failed }), SIZE).join('\n')).toMatch(/Error\s+\{"type":"SystemRebootError"\}/);
  });

  it('puts the newest log lines at the bottom, formatted, within the screen', () => {
    const log = Array.from({ length: 40 }, (_, i) => JSON.stringify({ level: 30, time: NOW * 1000, msg: `line ${i}` }));
    const lines = renderStatus(input({ logLines: log }), SIZE);
    expect(lines).toHaveLength(24);
    expect(lines.at(-2)).toMatch(/INFO {2}line 39$/);
    expect(lines.join('\n')).not.toContain('line 0\n');
  });

  it('reports a disk listing failure as text', () => {
    expect(renderStatus(input({ disks: 'lsblk failed: not installed' }), SIZE).join('\n')).toMatch(
      /Disks\s+lsblk failed/,
    );
  });

  it('cuts long lines and strips control characters', () => {
    const nics = [{ name: 'eth0', mac: 'm', addresses: ['x'.repeat(200)] }];
    const lines = renderStatus(input({ nics, logLines: ['evil \x1b[2J text'] }), { width: 40, height: 20 });
    expect(lines.every((l) => l.length <= 40)).toBe(true);
    expect(lines.join('\n')).not.toContain('\x1b');
  });
});

describe('formatLogLine', () => {
  it('renders pino records as time, level, message and fields', () => {
    const line = JSON.stringify({
      level: 40,
      time: Date.UTC(2026, 0, 1, 12, 34, 56),
      svc: 'x',
      msg: 'slow',
      dev: '/dev/vda',
      n: 3,
    });
    expect(formatLogLine(line)).toBe('12:34:56 WARN  slow dev=/dev/vda n=3');
  });

  it('keeps non-JSON lines (a crash trace on stderr) as they are', () => {
    expect(formatLogLine('TypeError: boom')).toBe('TypeError: boom');
    expect(formatLogLine('[1,2]')).toBe('[1,2]');
  });
});

describe('renderPage', () => {
  const body = Array.from({ length: 100 }, (_, i) => `row ${i}`);

  it('shows the newest rows by default and scrolls up by offset, clamped', () => {
    const bottom = renderPage('Agent log', body, 0, SIZE, false);
    expect(bottom.lines[0]).toBe('Agent log (lines 80-100 of 100)');
    expect(bottom.lines.at(-2)).toBe('row 99');
    const up = renderPage('Agent log', body, 30, SIZE, false);
    expect(up.lines.at(-2)).toBe('row 69');
    const top = renderPage('Agent log', body, 1000, SIZE, false);
    expect(top.offset).toBe(79);
    expect(top.lines[2]).toBe('row 0');
    expect(renderPage('Agent log', body, -5, SIZE, false).offset).toBe(0);
  });

  it('handles an empty body', () => {
    const r = renderPage('Commands', [], 0, SIZE, true);
    expect(r.lines[0]).toBe('Commands (empty)');
    expect(r.lines).toHaveLength(24);
    expect(r.lines.at(-1)).toContain('[s] shell');
  });
});

describe('commands list', () => {
  it('lists every command with its result or error', () => {
    const s = status({}, [
      {
        id: 'a',
        name: 'standby.get_partition_uuids',
        status: 'SUCCEEDED',
        started_at: NOW - 20,
        finished_at: NOW - 19,
        result: { root_uuid: 'u' },
        error: null,
      },
      {
        id: 'b',
        name: 'deploy.execute_deploy_step',
        status: 'FAILED',
        started_at: NOW - 10,
        finished_at: NOW - 2,
        result: null,
        error: { type: 'ImageWriteError', message: 'no space' },
      },
    ]);
    const body = commandsBody(s, NOW);
    expect(body[0]).toMatch(/standby.get_partition_uuids SUCCEEDED 1 s {2}id=a$/);
    expect(body[1]).toBe('    result: {"root_uuid":"u"}');
    expect(body[2]).toMatch(/deploy.execute_deploy_step FAILED 8 s/);
    expect(body[3]).toContain('ImageWriteError');
    expect(commandsBody(null, NOW)).toEqual(['no commands yet']);
  });

  it('picks the running command over later finished ones', () => {
    const s = status({}, [
      { id: 'a', name: 'x.run', status: 'RUNNING', started_at: NOW, result: null, error: null },
      { id: 'b', name: 'x.sync', status: 'SUCCEEDED', started_at: NOW, result: null, error: null },
    ]);
    expect(currentCommand(s)?.id).toBe('a');
    expect(currentCommand(null)).toBeUndefined();
  });
});

describe('formatting helpers', () => {
  it('formats sizes and ages', () => {
    expect(formatBytes(512)).toBe('512 B');
    expect(formatBytes(1536)).toBe('1.5 KiB');
    expect(formatBytes(8 * 1024 ** 4)).toBe('8.0 TiB');
    expect(formatAge(59.6)).toBe('60 s');
    expect(formatAge(600)).toBe('10 min');
    expect(formatAge(10800)).toBe('3 h');
    expect(formatAge(-3)).toBe('0 s');
  });
});
