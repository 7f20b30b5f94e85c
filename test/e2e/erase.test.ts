// Cleaning that really erases, in the built ramdisk under QEMU: an emulated NVMe namespace (QEMU's nvme
// device implements Format NVM), a SATA disk on an AHCI controller and a virtio disk, each filled with a
// pattern that names its sector. erase_devices runs through the agent's API with Ironic's settings in
// driver_internal_info; the host then reads the disk files: no sector of the pattern survives, and each
// disk reports the method that erased it and a passing read-back.
import { open, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { workDir } from '../helpers/make-image.ts';
import { agentCommand, agentStatus } from './agent-api.ts';
import { OUT, randomMac, startVm, until, type Vm } from './vm.ts';

const MiB = 1024 * 1024;
const SIZE = 48 * MiB;
const SECTOR = 512;
let work: Awaited<ReturnType<typeof workDir>>;
let vm: Vm | undefined;

beforeEach(async () => {
  work = await workDir('ina-e2e-erase-');
});

afterEach(async () => {
  if (vm) {
    await vm.kill();
    const serial = vm.serial();
    if (serial) await writeFile(join(OUT, 'e2e-serial-erase.log'), serial);
  }
  await work.cleanup();
  vm = undefined;
});

function report(line: string): void {
  process.stdout.write(`[e2e] ${line}\n`);
}

/** Sector n of `tag`'s disk: its tag, its number, then 0xa5 to the end: no erased sector can look like it. */
function patternSector(tag: string, n: number): Buffer {
  const s = Buffer.alloc(SECTOR, 0xa5);
  s.write(`INA-ERASE-${tag}-${n}:`, 0, 'latin1');
  return s;
}

async function patternDisk(tag: string): Promise<string> {
  const path = join(work.dir, `${tag}.img`);
  const fh = await open(path, 'w');
  try {
    const chunk = Buffer.alloc(MiB);
    for (let at = 0; at < SIZE; at += MiB) {
      for (let s = 0; s < MiB / SECTOR; s++) patternSector(tag, (at + s * SECTOR) / SECTOR).copy(chunk, s * SECTOR);
      await fh.write(chunk, 0, MiB, at);
    }
  } finally {
    await fh.close();
  }
  return path;
}

/** Sectors of the file that still hold the pattern, and how many bytes are not zero. */
async function survivors(path: string): Promise<{ pattern: number; nonZero: number }> {
  const fh = await open(path, 'r');
  let pattern = 0;
  let nonZero = 0;
  try {
    const buf = Buffer.alloc(MiB);
    for (let at = 0; at < SIZE; at += MiB) {
      const { bytesRead } = await fh.read(buf, 0, MiB, at);
      for (let s = 0; s < bytesRead; s += SECTOR) {
        const sector = buf.subarray(s, s + SECTOR);
        // Any trace: the sector's tag, or a run of the fill byte.
        if (sector.includes('INA-ERASE-') || sector.includes(Buffer.alloc(32, 0xa5))) pattern++;
      }
      for (let i = 0; i < bytesRead; i++) if (buf[i] !== 0) nonZero++;
    }
  } finally {
    await fh.close();
  }
  return { pattern, nonZero };
}

describe('erase_devices in the ramdisk under QEMU', () => {
  it('erases an NVMe namespace with Format NVM, a SATA disk on AHCI and a virtio disk: no pattern survives, each disk reports its method and read-back', async () => {
    const virtio = await patternDisk('virtio');
    const nvme = await patternDisk('nvme');
    const sata = await patternDisk('sata');
    for (const p of [nvme, sata, virtio]) expect((await survivors(p)).pattern).toBe(SIZE / SECTOR);
    vm = await startVm({
      disk: virtio,
      otherDisks: [
        { file: nvme, bus: 'nvme', serial: 'E2ENVME0' },
        { file: sata, bus: 'sata', serial: 'E2ESATA0' },
      ],
      serialLog: join(work.dir, 'serial.log'),
      mac: randomMac(),
      forwards: [],
      append: () => 'standalone=1 ipa-debug=1',
    });
    const v = vm;
    await until('GET /v1/status', () => agentStatus(v), 180_000);
    report(`booted in ${((Date.now() - v.startedAt) / 1000).toFixed(1)} s (${v.accel})`);

    const started = Date.now();
    const r = await agentCommand<{ clean_result: Record<string, any> }>(v, 'clean.execute_clean_step', {
      step: { step: 'erase_devices', priority: 10, interface: 'deploy', reboot_requested: false, abortable: true },
      node: {
        uuid: 'e2e-erase',
        properties: {},
        instance_info: {},
        // What Ironic's defaults put there (agent_add_clean_params), with three disks at once.
        driver_internal_info: {
          agent_erase_devices_iterations: 1,
          agent_erase_devices_zeroize: true,
          agent_continue_if_secure_erase_failed: false,
          agent_continue_if_ata_erase_failed: false,
          agent_enable_nvme_secure_erase: true,
          agent_enable_ata_secure_erase: true,
          disk_erasure_concurrency: 3,
        },
      },
      ports: [],
      clean_version: {},
    });
    report(
      `erase_devices took ${((Date.now() - started) / 1000).toFixed(1)} s: ${JSON.stringify(r.command_result ?? r.command_error)}`,
    );
    expect(r.command_error).toBeNull();
    expect(r.command_status).toBe('SUCCEEDED');
    const result = r.command_result!.clean_result;
    expect(Object.keys(result).sort()).toEqual(['/dev/nvme0n1', '/dev/sda', '/dev/vda']);
    expect(['nvme crypto erase', 'nvme user-data erase']).toContain(result['/dev/nvme0n1'].method);
    for (const dev of ['/dev/nvme0n1', '/dev/sda', '/dev/vda']) {
      expect(result[dev]).toMatchObject({ bytes: SIZE, verification: { ok: true, failure: null } });
      expect(result[dev].verification.regions).toBe(18);
    }
    // QEMU's SATA disk has no ATA security feature set: hdparm ran, found none, and the disk went on.
    expect(result['/dev/sda'].attempts[0]).toMatchObject({ method: 'ata security erase' });
    expect(['secure discard', 'discard', 'overwrite']).toContain(result['/dev/sda'].method);
    // vm.ts attaches the virtio disk without discard=unmap: QEMU acknowledges the guest's discards and
    // ignores them, a drive that keeps data after TRIM. The read-back caught it and the overwrite ran.
    expect(result['/dev/vda'].method).toBe('overwrite');
    expect(result['/dev/vda'].attempts).toContainEqual({
      method: 'discard',
      error: expect.stringMatching(/^read-back found non-zero data at byte \d+ \(seed \d+\)$/),
    });
    // Each disk's progress and result reached the console (ipa-debug puts the agent's log there).
    const serial = v.serial();
    for (const dev of ['/dev/nvme0n1', '/dev/sda', '/dev/vda'])
      expect(serial).toContain(`${dev} erased: ${result[dev].method}`);
    expect(serial).toMatch(/read-back samples of \/dev\/nvme0n1 drawn with seed \d+/);
    // ipa-debug alone (what a conductor with debug=true adds) offers no shell on the console.
    expect(serial).toMatch(/\[l\] full log {2}\[c\] commands/);
    expect(serial).not.toContain('[s] shell');

    await v.kill();
    for (const [dev, p] of [
      ['/dev/nvme0n1', nvme],
      ['/dev/sda', sata],
      ['/dev/vda', virtio],
    ] as const) {
      const left = await survivors(p);
      report(`${dev}: ${result[dev].method}, ${left.pattern} pattern sectors left, ${left.nonZero} non-zero bytes`);
      expect(left.pattern).toBe(0);
    }
  });
});
