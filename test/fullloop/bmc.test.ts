// The BMC alone, driven by the real ipmitool the way Ironic's ipmitool driver drives it, with a stand-in
// for QEMU that records its arguments: power state follows the process, the boot device Ironic sets
// becomes `-boot order=` (SeaBIOS) or `bootindex` (OVMF), soft power off reaches QMP, each boot gets its
// own serial log.
import { spawn, spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { until } from '../helpers/until.ts';

const ipmi = (port: number, ...args: string[]) =>
  spawnSync(
    'ipmitool',
    ['-I', 'lanplus', '-H', '127.0.0.1', '-p', String(port), '-U', 'admin', '-P', 'pw', '-L', 'ADMINISTRATOR', ...args],
    { encoding: 'utf8' },
  );

describe.each(['bios', 'uefi'] as const)('bmc.py (%s)', (firmware) => {
  it('powers a recorded QEMU command on and off with the boot device Ironic set', async () => {
    const dir = mkdtempSync('/tmp/fullloop-bmc-');
    const port = 20000 + Math.floor(Math.random() * 20000);
    writeFileSync(
      join(dir, 'bmc.json'),
      JSON.stringify({
        port,
        username: 'admin',
        password: 'pw',
        firmware,
        state_dir: dir,
        qemu: ['/bin/sh', '-c', `echo "$@" >> ${dir}/argv; exec sleep 60`, 'qemu'],
        disk_device: 'virtio-blk-pci,id=disk0',
        nic_device: 'virtio-net-pci,id=nic0',
      }),
    );
    const bmc = spawn('/usr/bin/python3', [join(import.meta.dirname, 'bmc.py'), join(dir, 'bmc.json')], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let log = '';
    bmc.stdout.on('data', (d: Buffer) => (log += d.toString()));
    try {
      await until('the BMC to listen', () => log.includes('listening'), 10_000, 100);
      expect(ipmi(port, 'chassis', 'power', 'status').stdout).toContain('Chassis Power is off');
      expect(ipmi(port, 'chassis', 'bootdev', 'pxe').status).toBe(0);
      expect(ipmi(port, 'chassis', 'power', 'on').status).toBe(0);
      expect(ipmi(port, 'chassis', 'power', 'status').stdout).toContain('Chassis Power is on');
      await until(
        'the recorded QEMU command to start',
        () => readFileSync(join(dir, 'argv'), 'utf8').length > 0,
        10_000,
        100,
      );
      const first = readFileSync(join(dir, 'argv'), 'utf8');
      if (firmware === 'bios') expect(first).toContain('-boot order=n');
      else
        expect(first).toMatch(/-device virtio-net-pci,id=nic0,bootindex=1 -device virtio-blk-pci,id=disk0,bootindex=2/);
      expect(first).toContain(`path=${dir}/serial-1-network.log`);

      // soft power off goes to QMP; the stand-in has none, so the BMC answers with an error and stays on
      expect(ipmi(port, 'chassis', 'power', 'soft').status).not.toBe(0);
      expect(ipmi(port, 'chassis', 'power', 'off').status).toBe(0);
      expect(ipmi(port, 'chassis', 'power', 'status').stdout).toContain('Chassis Power is off');
      expect(ipmi(port, 'chassis', 'bootdev', 'disk', 'options=persistent').status).toBe(0);
      expect(ipmi(port, 'chassis', 'power', 'on').status).toBe(0);
      await until(
        'the recorded QEMU command to start again',
        () => readFileSync(join(dir, 'argv'), 'utf8').split('\n').filter(Boolean).length === 2,
        10_000,
        100,
      );
      const second = readFileSync(join(dir, 'argv'), 'utf8').split('\n')[1]!;
      if (firmware === 'bios') expect(second).toContain('-boot order=c');
      else
        expect(second).toMatch(
          /-device virtio-blk-pci,id=disk0,bootindex=1 -device virtio-net-pci,id=nic0,bootindex=2/,
        );
      expect(second).toContain(`path=${dir}/serial-2-hd.log`);
      // a device the BMC cannot boot is refused, not accepted and ignored
      ipmi(port, 'chassis', 'bootdev', 'cdrom');
      await until('the refusal in the log', () => log.includes('refused'), 10_000, 100);
      expect(log).toContain('boot device optical refused');
      expect(ipmi(port, 'chassis', 'bootparam', 'get', '5').stdout).toMatch(/Force Boot from default Hard-Drive/);
      expect(log).toMatch(/power on boot=1 device=network[\s\S]*power off[\s\S]*power on boot=2 device=hd/);
    } finally {
      bmc.kill('SIGTERM');
      await new Promise((r) => bmc.once('exit', r));
      rmSync(dir, { recursive: true, force: true });
    }
  }, 60_000);
});
