// The serial console: a status screen on the console terminal, redrawn every two seconds from the
// agent's status and log files. It is its own process (init restarts it), so it keeps showing what
// happened after the agent crashed. Flags: --status-file, --log-file, --kernel-cmdline (default
// /proc/cmdline), --once (print the status page once and exit; for checks).
import { existsSync, readFileSync } from 'node:fs';
import { ParamReader } from '../config/reader.ts';
import { parseFlags, parseKernelCmdline } from '../config/sources.ts';
import { startTool } from '../exec.ts';
import { countLines, readDisks, readNics, readStatus, tailLines } from './inputs.ts';
import { keyAction, splitKeys } from './keys.ts';
import { commandsBody, logBody, renderPage, renderStatus, type ConsoleInput, type ScreenSize } from './screen.ts';

const flags = parseFlags(process.argv.slice(2));
const statusPath = flags.get('status-file') ?? '/run/ina/status.json';
const logPath = flags.get('log-file') ?? '/run/ina/agent.log';
const startsPath = flags.get('starts-file') ?? '/run/ina/agent.starts';
const shellAllowed = readShellAllowed(flags.get('kernel-cmdline') ?? '/proc/cmdline');

function readShellAllowed(cmdlinePath: string): boolean {
  let kernel: Map<string, string>;
  try {
    kernel = parseKernelCmdline(readFileSync(cmdlinePath, 'utf8'));
  } catch {
    return false;
  }
  const r = new ParamReader(kernel, (name) => `kernel parameter ${name}`);
  const on = (name: string) => {
    try {
      return r.bool(name, false);
    } catch {
      return false;
    }
  };
  // Not ipa-debug: Ironic adds it to every ramdisk of a conductor running with debug=true, and a root shell for
  // whoever reaches the console (serial-over-LAN, a remote KVM) must be the operator's explicit choice.
  return on('ina-console-shell');
}

// lsblk is a process start per look, which a CPU under emulation feels; disks change rarely.
const DISKS_EVERY_MS = 10_000;
/** What finalize_rescue leaves once the rescue user has its password (host/rescue-user.ts, under `/`). */
const RESCUED_MARKER = '/etc/.rescued';
let diskCache: { at: number; value: Awaited<ReturnType<typeof readDisks>> } | undefined;

async function currentDisks(): Promise<Awaited<ReturnType<typeof readDisks>>> {
  if (!diskCache || Date.now() - diskCache.at > DISKS_EVERY_MS)
    diskCache = { at: Date.now(), value: await readDisks() };
  return diskCache.value;
}

async function gather(logLines: number): Promise<ConsoleInput> {
  const [status, nics, disks, lines, agentStarts] = await Promise.all([
    readStatus(statusPath),
    readNics(),
    currentDisks(),
    tailLines(logPath, logLines),
    countLines(startsPath),
  ]);
  return { now: Date.now() / 1000, status, nics, disks, logLines: lines, agentStarts, shellAllowed };
}

function size(): ScreenSize {
  return { width: process.stdout.columns || 80, height: process.stdout.rows || 24 };
}

type Page = 'status' | 'log' | 'commands';
let page: Page = 'status';
let offset = 0;
let last = '';
let inShell = false;

async function draw(force = false): Promise<void> {
  if (inShell) return;
  const input = await gather(page === 'log' ? 5000 : 50);
  // Rescued: the terminal is for the rescue user's login now (run-console starts it when this exits).
  if (input.status?.status.phase === 'rescued' && existsSync(RESCUED_MARKER)) {
    setRaw(false);
    process.stdout.write(
      '\x1b[H\x1b[2J[console] rescue mode: log in as "rescue" with the password given to Ironic\r\n',
    );
    process.exit(0);
  }
  let lines: string[];
  if (page === 'status') {
    lines = renderStatus(input, size());
  } else {
    const body = page === 'log' ? logBody(input.logLines) : commandsBody(input.status, input.now);
    const r = renderPage(page === 'log' ? 'Agent log' : 'Commands', body, offset, size(), shellAllowed);
    offset = r.offset;
    lines = r.lines;
  }
  const text = lines.join('\r\n');
  if (!force && text === last) return;
  last = text;
  process.stdout.write(`\x1b[H\x1b[2J${text}`);
}

function redraw(force = false): void {
  draw(force).catch((err: unknown) => process.stdout.write(`\r\nconsole: ${String(err)}\r\n`));
}

function setRaw(on: boolean): void {
  if (process.stdin.isTTY) process.stdin.setRawMode(on);
}

async function openShell(): Promise<void> {
  inShell = true;
  setRaw(false);
  process.stdin.pause();
  process.stdout.write('\x1b[H\x1b[2J[console] shell; exit to return to the status screen\r\n');
  // mortal, as every started tool: a shell left behind by a killed console would take the keys of the next one
  await startTool('sh', [], { stdin: 'inherit', stdout: 'inherit', stderr: 'inherit' }).exit;
  process.stdin.resume();
  setRaw(true);
  inShell = false;
  redraw(true);
}

function onInput(data: Buffer): void {
  for (const key of splitKeys(data.toString('latin1'))) onKey(key);
}

function onKey(key: string): void {
  if (inShell) return;
  const pageRows = Math.max(1, size().height - 3);
  switch (keyAction(key)) {
    case 'log':
      page = 'log';
      offset = 0;
      break;
    case 'commands':
      page = 'commands';
      offset = 0;
      break;
    case 'back':
      page = 'status';
      break;
    case 'up':
      offset += 1;
      break;
    case 'down':
      offset -= 1;
      break;
    case 'page-up':
      offset += pageRows;
      break;
    case 'page-down':
      offset -= pageRows;
      break;
    case 'shell':
      if (shellAllowed) void openShell();
      return;
    case 'refresh':
      diskCache = undefined;
      break;
    case null:
      return;
  }
  redraw(true);
}

if (flags.has('once')) {
  // Not a top-level await: the ramdisk's bundles are CommonJS (scripts/bundle.sh).
  void gather(50).then((input) => process.stdout.write(`${renderStatus(input, size()).join('\n')}\n`));
} else {
  setRaw(true);
  process.stdin.on('data', onInput);
  process.on('SIGTERM', () => {
    setRaw(false);
    process.exit(0);
  });
  redraw(true);
  setInterval(() => redraw(), 2000);
  process.stdin.resume();
}
