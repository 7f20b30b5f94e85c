// The device zeroing the ranges a qcow2 image leaves unallocated (BLKZEROOUT through `blkdiscard --zeroout`,
// which the kernel turns into WRITE ZEROES or writes from its own zero page), alongside the writes of other
// ranges. One shell per image takes the ranges on its stdin and runs blkdiscard for each, rather than one tool
// started per range: starting a process blocks the agent's main thread for its fork and exec (5 to 15 ms
// each on a busy 2-core machine, docs/qcow2-streaming.md), and the download waits for that thread.
import { type Exit, mortal, reason, startTool, type Tool } from '../../exec.ts';

// Each range done is echoed, so that a failure leaves only the ranges not done to be written instead.
// Each blkdiscard gets the parent-death signal through setpriv: the kernel does not pass the shell's on to its
// children, and a blkdiscard left behind by a SIGKILLed agent would go on zeroing a disk the next deploy writes.
// Stopped, the shell stops its blkdiscard too.
// `pid` is cleared after each wait: the trap must not signal a finished blkdiscard's number, reused by then.
const SCRIPT = [
  'setpriv=$1 dev=$2',
  'pid=',
  'trap \'[ -n "$pid" ] && kill "$pid" 2>/dev/null; exit 143\' TERM',
  'while read -r off len; do',
  '  "$setpriv" --pdeathsig KILL -- blkdiscard --zeroout --offset "$off" --length "$len" "$dev" & pid=$!',
  '  wait $pid || exit',
  '  pid=',
  '  echo "$off"',
  'done',
].join('\n');

export class DeviceZeroing {
  private child: Tool | null = null;
  private exit: Promise<Exit> | null = null;
  /** Every range handed over, in order; the first `done` of them are zeroed. */
  private readonly ranges: [number, number][] = [];
  private done = 0;
  private ended = false;

  constructor(private readonly device: string) {}

  /** False once the device refused a range (or the shell is gone): the zeros are then the caller's to write. */
  get working(): boolean {
    return !this.ended;
  }

  /** Has the device zero `length` bytes at `start` (both 4 KiB-aligned), while the caller goes on. */
  add(start: number, length: number): void {
    const child = this.child ?? this.start();
    this.ranges.push([start, length]);
    // No stdin: the shell could not be started (its `error` ends it), and finish() returns the range.
    child.stdin?.write(`${start} ${length}\n`);
  }

  private start(): Tool {
    const [setpriv] = mortal('true', []);
    const child = startTool('sh', ['-c', SCRIPT, 'zeroout', setpriv, this.device]);
    child.stdin?.on('error', () => undefined);
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      for (const c of text) if (c === '\n') this.done++;
    });
    this.exit = child.exit.finally(() => {
      this.ended = true;
    });
    this.child = child;
    return child;
  }

  /** Waits until every range is zeroed or refused; returns the ranges not zeroed, and how the shell ended. */
  async finish(): Promise<{ unzeroed: [number, number][]; why?: string }> {
    if (!this.child) return { unzeroed: [] };
    this.child.stdin?.end();
    const exit = await this.exit!;
    return { unzeroed: this.ranges.slice(this.done), why: reason(exit) };
  }

  /** Stops the shell and the blkdiscard it runs: one range can take hours on a disk without WRITE ZEROES. */
  async stop(): Promise<void> {
    if (!this.child) return;
    this.child.kill('SIGTERM');
    await this.exit;
  }
}
