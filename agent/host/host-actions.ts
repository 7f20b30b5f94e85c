// The only code that powers the machine off or reboots it. Real only with `--host-actions=real`
// (the ramdisk's init passes it); everywhere else the action is simulated: the agent behaves as if it
// had just booted again (forgets token and history, looks itself up anew), and the host is untouched.
import { EventEmitter } from 'node:events';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
import { SystemRebootError, errorText } from '../errors.ts';
import { run } from '../exec.ts';
import { listSys } from './sysfs.ts';
import type { Logger } from '../log.ts';

export type PowerAction = 'poweroff' | 'reboot';

export interface HostActionEvents {
  /** A simulated power-off or reboot happened; main.ts restarts the agent's "boot" on it. */
  'simulated-restart': [PowerAction];
  /** Lockdown or rescue: stop the API and the heartbeat for good, and idle without exiting. */
  quiesce: [QuiesceReason];
}

export type QuiesceReason = 'lockdown' | 'rescue';

export class HostActions extends EventEmitter<HostActionEvents> {
  constructor(
    readonly mode: 'simulated' | 'real',
    private readonly log: Logger,
  ) {
    super();
  }

  /** Flushes filesystem buffers; `sync` failing is an error, dropping caches is best effort. */
  async sync(devices: readonly string[] = []): Promise<void> {
    await run('sync', [], { log: this.log });
    if (this.mode === 'real') {
      await writeFile('/proc/sys/vm/drop_caches', '3').catch((e) =>
        this.log.warn({ err: errorText(e) }, 'drop_caches failed'),
      );
    }
    for (const dev of devices) {
      await run('blockdev', ['--flushbufs', dev], { log: this.log }).catch((e) =>
        this.log.warn({ dev, err: errorText(e) }, 'flushbufs failed'),
      );
    }
  }

  /**
   * Powers off or reboots after `delayMs`, so that the command's result reaches the conductor first.
   * Returns at once; failures of the real action are logged (the conductor then sees a live agent).
   */
  schedule(action: PowerAction, delayMs = 1000): void {
    this.log.info({ action, mode: this.mode }, 'power action scheduled');
    setTimeout(() => {
      this.perform(action).catch((err) => this.log.error({ action, err: errorText(err) }, 'power action failed'));
    }, delayMs).unref();
  }

  /**
   * After `delayMs` (the command's reply goes first): stop serving and heartbeating for good; on lockdown also
   * take every network interface down, for real only in a ramdisk (elsewhere the host's NICs are only named).
   */
  quiesce(reason: QuiesceReason, delayMs = 500): void {
    this.log.info({ reason, mode: this.mode }, 'agent going quiet');
    setTimeout(() => {
      this.emit('quiesce', reason);
      if (reason === 'lockdown')
        this.nicsDown().catch((err) => this.log.error({ err: errorText(err) }, 'lockdown: taking NICs down failed'));
    }, delayMs).unref();
  }

  private async nicsDown(): Promise<void> {
    if (this.mode === 'simulated') {
      this.log.warn({ nics: await listNics() }, 'lockdown simulated: network interfaces left up (outside a ramdisk)');
      return;
    }
    // The DHCP clients first, and gone before a NIC goes down: at their next lease event, or as dhcpcd leaves,
    // a client brings its NIC up again. Before them the ramdisk's watcher, which would start clients for a NIC
    // that appears later. The NICs are listed after, so that one that appeared meanwhile goes down too.
    await stopProcesses(['dhcp-nics']);
    const stopped = await stopProcesses(['udhcpc', 'dhcpcd']);
    const nics = await listNics();
    for (const nic of nics) {
      await run('ip', ['link', 'set', nic, 'down'], { log: this.log }).catch((e) =>
        this.log.warn({ nic, err: errorText(e) }, 'ip link set down failed'),
      );
    }
    this.log.info({ nics, dhcpClientsStopped: stopped }, 'lockdown: network interfaces down');
  }

  private async perform(action: PowerAction): Promise<void> {
    if (this.mode === 'simulated') {
      this.emit('simulated-restart', action);
      return;
    }
    await this.sync().catch((e) => this.log.warn({ err: errorText(e) }, 'sync before power action failed'));
    try {
      const r = await run(action, ['-f'], { log: this.log });
      if (!/ignoring request/i.test(r.stderr)) return;
    } catch (err) {
      this.log.warn({ action, err: errorText(err) }, `${action} failed, using sysrq`);
    }
    try {
      await writeFile('/proc/sysrq-trigger', action === 'poweroff' ? 'o' : 'b');
    } catch (err) {
      throw new SystemRebootError(`${action} failed and the sysrq fallback failed too: ${errorText(err)}`);
    }
  }
}

const listNics = async (): Promise<string[]> => (await listSys('/sys/class/net')).filter((n) => n !== 'lo').sort();

const alive = (pid: number): boolean => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

/**
 * Ends every process with one of `names` (the DHCP clients and the watcher the ramdisk started) and waits until
 * they are gone (SIGKILL after 3 s); returns how many there were.
 */
async function stopProcesses(names: readonly string[]): Promise<number> {
  const pids: number[] = [];
  for (const pid of (await readdir('/proc')).filter((p) => /^\d+$/.test(p))) {
    const comm = await readFile(`/proc/${pid}/comm`, 'utf8').catch(() => '');
    if (!names.includes(comm.trim())) continue;
    try {
      process.kill(Number(pid), 'SIGTERM');
      pids.push(Number(pid));
    } catch {
      // already gone
    }
  }
  const deadline = Date.now() + 3000;
  while (pids.some(alive) && Date.now() < deadline) await sleep(50);
  for (const pid of pids.filter(alive)) process.kill(pid, 'SIGKILL');
  return pids.length;
}
