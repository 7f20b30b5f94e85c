// Pure text rendering of the serial console's screens: the status page, the full log and the command
// list. Inputs are plain data (read elsewhere); output is an array of lines no wider than the screen.
import type { StatusFile } from '../status-file.ts';

export interface Nic {
  name: string;
  mac: string;
  addresses: string[];
}

export interface Disk {
  name: string;
  bytes: number;
  type: string;
  model?: string;
}

export interface ConsoleInput {
  now: number;
  status: StatusFile | null;
  nics: Nic[];
  disks: Disk[] | string;
  logLines: string[];
  agentStarts: number;
  shellAllowed: boolean;
}

export interface ScreenSize {
  width: number;
  height: number;
}

export type Command = StatusFile['commands'][number];

/** Keys listed at the bottom of every page. */
export function keyHelp(page: 'status' | 'log' | 'commands', shellAllowed: boolean): string {
  const keys = page === 'status' ? ['[l] full log', '[c] commands'] : ['[q] back', '[up/down/PgUp/PgDn] scroll'];
  if (shellAllowed) keys.push('[s] shell');
  return keys.join('  ');
}

export function formatBytes(n: number): string {
  const units = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let v = n;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function formatAge(seconds: number): string {
  const s = Math.max(0, Math.round(seconds));
  if (s < 120) return `${s} s`;
  if (s < 7200) return `${Math.round(s / 60)} min`;
  return `${Math.round(s / 3600)} h`;
}

function clock(epochS: number): string {
  return new Date(epochS * 1000).toISOString().slice(11, 19);
}

const LEVELS: Record<number, string> = { 10: 'TRACE', 20: 'DEBUG', 30: 'INFO', 40: 'WARN', 50: 'ERROR', 60: 'FATAL' };
const SKIP_KEYS = new Set(['level', 'time', 'msg', 'svc', 'pid', 'hostname']);

/** One pino JSON line as `HH:MM:SS LEVEL msg k=v ...`; anything else (a crash trace) as it is. */
export function formatLogLine(line: string): string {
  let rec: unknown;
  try {
    rec = JSON.parse(line);
  } catch {
    return line;
  }
  if (typeof rec !== 'object' || rec === null || Array.isArray(rec)) return line;
  const r = rec as Record<string, unknown>;
  const time = typeof r.time === 'number' ? clock(r.time / 1000) : '--:--:--';
  const level = (typeof r.level === 'number' && LEVELS[r.level]) || String(r.level ?? '');
  const extra = Object.entries(r)
    .filter(([k]) => !SKIP_KEYS.has(k))
    .map(([k, v]) => `${k}=${typeof v === 'string' ? v : JSON.stringify(v)}`);
  return [time, level.padEnd(5), String(r.msg ?? ''), ...extra].join(' ');
}

function fit(line: string, width: number): string {
  const clean = line.replace(/[\x00-\x1f\x7f]/g, ' ');
  return clean.length <= width ? clean : `${clean.slice(0, Math.max(0, width - 1))}~`;
}

function field(label: string, value: string): string {
  return `${label.padEnd(11)} ${value}`;
}

function compactJson(v: unknown): string {
  if (v === null || v === undefined) return '';
  return typeof v === 'string' ? v : JSON.stringify(v);
}

function commandLine(c: Command, now: number): string {
  const took = (c.finished_at ?? now) - c.started_at;
  return `${c.name} ${c.status} ${formatAge(took)}`;
}

/** A parallel erase's `{disks: {<dev>: report}}` as one line per disk: device, phase, pass, bytes. */
function diskProgress(result: unknown): string[] | null {
  const disks = (result as { disks?: unknown } | null)?.disks;
  if (typeof disks !== 'object' || disks === null) return null;
  return Object.entries(disks as Record<string, Record<string, unknown>>).map(([dev, r]) => {
    const pass = typeof r.pass === 'number' ? ` pass ${r.pass}/${String(r.passes)}` : '';
    const done = typeof r.bytes_done === 'number' && r.bytes_done > 0 ? ` ${formatBytes(r.bytes_done)}` : '';
    const of = typeof r.bytes_total === 'number' ? ` of ${formatBytes(r.bytes_total)}` : '';
    return `${dev} ${String(r.phase)}${pass}${done}${of}`;
  });
}

export function currentCommand(status: StatusFile | null): Command | undefined {
  const cmds = status?.commands ?? [];
  return cmds.findLast((c) => c.status === 'RUNNING') ?? cmds.at(-1);
}

export function renderStatus(input: ConsoleInput, size: ScreenSize): string[] {
  const s = input.status?.status;
  const lines: string[] = [];
  const title = `ironic-node-agent ${s?.version ?? ''}`.trim();
  const when = `${new Date(input.now * 1000).toISOString().slice(0, 19).replace('T', ' ')} UTC`;
  lines.push(title + ' '.repeat(Math.max(1, size.width - title.length - when.length)) + when);
  lines.push('-'.repeat(size.width));
  if (!s) {
    lines.push(field('Agent', 'no status yet (agent starting or not running)'));
  } else {
    const starts = input.agentStarts > 1 ? `, restarted ${input.agentStarts - 1}x` : '';
    lines.push(field('Node', s.node?.uuid ?? '(not looked up yet)'));
    lines.push(field('Conductor', s.conductorUrl ?? '(none: standalone)'));
    lines.push(field('Agent', `${s.phase}, up ${formatAge(input.now - s.startedAt)}${starts}`));
    if (s.callbackUrl) lines.push(field('Callback', s.callbackUrl));
    const insp = s.inspection;
    if (insp) {
      lines.push(field('Inspection', `${insp.phase}${insp.result ? `: ${insp.result}` : ''}`));
      if (insp.summary) {
        // The time first: an 80-column console cuts the end of the line.
        lines.push(
          field(
            'Inventory',
            `${insp.collectionMs !== undefined ? `collected in ${insp.collectionMs} ms: ` : ''}${insp.summary}`,
          ),
        );
      }
    }
    const hb = s.lastHeartbeat;
    lines.push(
      field(
        'Heartbeat',
        hb
          ? `${clock(hb.at)} (${formatAge(input.now - hb.at)} ago) ${hb.ok ? 'ok' : 'FAILED'}: ${hb.status}`
          : 'none yet',
      ),
    );
  }
  if (input.nics.length === 0) lines.push(field('Network', 'no interfaces'));
  for (const [i, n] of input.nics.entries()) {
    lines.push(field(i === 0 ? 'Network' : '', `${n.name} ${n.mac} ${n.addresses.join(' ') || '(no address)'}`));
  }
  const cmd = currentCommand(input.status);
  lines.push(field('Command', cmd ? commandLine(cmd, input.now) : 'none'));
  const perDisk = cmd?.status === 'RUNNING' ? diskProgress(cmd.result) : null;
  if (perDisk) {
    for (const [i, l] of perDisk.entries()) lines.push(field(i === 0 ? 'Progress' : '', l));
  } else if (cmd?.status === 'RUNNING' && cmd.result !== null && cmd.result !== undefined) {
    lines.push(field('Progress', compactJson(cmd.result)));
  } else if (cmd?.error) {
    lines.push(field('Error', compactJson(cmd.error)));
  }
  if (typeof input.disks === 'string') lines.push(field('Disks', input.disks));
  else if (input.disks.length === 0) lines.push(field('Disks', 'none'));
  else {
    for (const [i, d] of input.disks.entries()) {
      lines.push(
        field(i === 0 ? 'Disks' : '', `${d.name} ${formatBytes(d.bytes)} ${d.type}${d.model ? ` ${d.model}` : ''}`),
      );
    }
  }
  lines.push('-'.repeat(size.width));
  const room = Math.max(0, size.height - lines.length - 1);
  const tail = room > 0 ? input.logLines.slice(-room).map(formatLogLine) : [];
  lines.push(...tail);
  while (lines.length < size.height - 1) lines.push('');
  lines.push(keyHelp('status', input.shellAllowed));
  return lines.map((l) => fit(l, size.width));
}

/** A scrollable page: `offset` counts lines up from the end (0 = the newest at the bottom). */
export function renderPage(
  title: string,
  body: string[],
  offset: number,
  size: ScreenSize,
  shellAllowed: boolean,
): { lines: string[]; offset: number } {
  const room = Math.max(1, size.height - 3);
  const maxOffset = Math.max(0, body.length - room);
  const off = Math.min(Math.max(0, offset), maxOffset);
  const end = body.length - off;
  const shown = body.slice(Math.max(0, end - room), end);
  const pos = body.length === 0 ? 'empty' : `lines ${end - shown.length + 1}-${end} of ${body.length}`;
  const lines = [`${title} (${pos})`, '-'.repeat(size.width), ...shown];
  while (lines.length < size.height - 1) lines.push('');
  lines.push(keyHelp('log', shellAllowed));
  return { lines: lines.map((l) => fit(l, size.width)), offset: off };
}

export function logBody(logLines: string[]): string[] {
  return logLines.map(formatLogLine);
}

export function commandsBody(status: StatusFile | null, now: number): string[] {
  const cmds = status?.commands ?? [];
  if (cmds.length === 0) return ['no commands yet'];
  return cmds.flatMap((c) => {
    const out = [`${clock(c.started_at)} ${commandLine(c, now)}  id=${c.id}`];
    if (c.error) out.push(`    error: ${compactJson(c.error)}`);
    else if (c.result !== null && c.result !== undefined) out.push(`    result: ${compactJson(c.result)}`);
    return out;
  });
}
