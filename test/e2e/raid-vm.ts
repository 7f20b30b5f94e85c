// The software RAID e2e machine: the built ramdisk in QEMU with blank sparse virtio disks (vda, vdb, …, serials
// E2EDISK<n>), under SeaBIOS or OVMF with a private copy of its variable store, the agent driven through its API
// as Ironic drives it. Shared by the RAID e2e files; `close` keeps the serial log in image-build/out and removes
// the disk files.
import { copyFile, open, truncate, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { expect } from 'vitest';
import { workDir } from '../helpers/make-image.ts';
import { agentCommand, agentStatus, type CommandRecord } from './agent-api.ts';
import { OUT, randomMac, startVm, until, type GuestForward, type Vm } from './vm.ts';

const GiB = 2 ** 30;
const OVMF_CODE = '/usr/share/OVMF/OVMF_CODE_4M.fd';
const OVMF_VARS = '/usr/share/OVMF/OVMF_VARS_4M.fd';

export type Result = CommandRecord;

export interface RaidVm {
  vm: Vm;
  dir: string;
  /** The disk files, in guest order (vda, vdb, …). */
  disks: string[];
  /** The VM's copy of the OVMF variable store (UEFI only). */
  vars?: string;
  /** POST /v1/commands/?wait=true; the final record. */
  command(name: string, params: Record<string, unknown>): Promise<Result>;
  /** deploy.execute_deploy_step of `step` on `iface` with `args`, for `node`, as Ironic sends it. */
  deployStep(node: object, step: string, iface: string, args: Record<string, unknown>): Promise<Result>;
  /** Powers the VM off through the agent and waits for QEMU to exit (so the disk files and variables are final). */
  powerOff(): Promise<void>;
  close(): Promise<void>;
}

export function reporter(tag: string): (line: string) => void {
  return (line) => process.stdout.write(`[e2e ${tag}] ${line}\n`);
}

/** Bytes of a disk file, as the host reads it (QEMU writes through to the file). */
export async function bytesAt(file: string, at: number, length: number): Promise<Buffer> {
  const fh = await open(file, 'r');
  try {
    const buf = Buffer.alloc(length);
    await fh.read(buf, 0, length, at);
    return buf;
  } finally {
    await fh.close();
  }
}

export async function startRaidVm(o: {
  tag: string;
  disks: number;
  diskGiB: number;
  uefi?: boolean;
  forwards?: GuestForward[];
  append: string;
}): Promise<RaidVm> {
  const report = reporter(o.tag);
  const work = await workDir(`ina-e2e-${o.tag}-`);
  const disks: string[] = [];
  let vm: Vm | undefined;
  const close = async () => {
    if (vm) {
      await vm.kill();
      await writeFile(join(OUT, `e2e-serial-${o.tag}.log`), vm.serial());
    }
    await work.cleanup();
  };
  try {
    for (let i = 0; i < o.disks; i++) {
      const path = join(work.dir, `vd${String.fromCharCode(97 + i)}.img`);
      await writeFile(path, '');
      await truncate(path, o.diskGiB * GiB);
      disks.push(path);
    }
    const vars = o.uefi ? join(work.dir, 'OVMF_VARS.fd') : undefined;
    if (vars) await copyFile(OVMF_VARS, vars);
    vm = await startVm({
      disk: disks[0]!,
      moreDisks: disks.slice(1),
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: o.forwards ?? [],
      append: () => o.append,
      ...(vars ? { uefi: { code: OVMF_CODE, vars } } : {}),
    });
    const v = vm;
    await until('GET /v1/status', () => agentStatus(v), 300_000);
    report(`booted in ${((Date.now() - v.startedAt) / 1000).toFixed(1)} s (${v.accel}${o.uefi ? ', OVMF' : ''})`);
    const command = async (name: string, params: Record<string, unknown>): Promise<Result> => {
      const t0 = Date.now();
      const body = await agentCommand(v, name, params);
      const step = (params.step as { step?: string } | undefined)?.step ?? '';
      report(`${name} ${step}: ${body.command_status} in ${((Date.now() - t0) / 1000).toFixed(1)} s`);
      return body;
    };
    const powerOff = async () => {
      expect((await command('standby.power_off', {})).command_status).toBe('SUCCEEDED');
      const code = await Promise.race([v.exited, new Promise((r) => setTimeout(() => r('still running'), 120_000))]);
      expect(code, v.stderr()).toBe(0);
    };
    const deployStep = (node: object, step: string, iface: string, args: Record<string, unknown>) =>
      command('deploy.execute_deploy_step', {
        step: { step, priority: 0, interface: iface, reboot_requested: false, args },
        node,
        ports: [],
        deploy_version: {},
      });
    return { vm: v, dir: work.dir, disks, ...(vars ? { vars } : {}), command, deployStep, powerOff, close };
  } catch (err) {
    await close();
    throw err;
  }
}
