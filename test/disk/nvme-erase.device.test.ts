// NVMe secure erase with a fake nvme-cli on PATH (recorded id-ctrl fields, a format that zeroes the test's
// loop device, does nothing, or fails): which Secure Erase Setting is chosen, what is refused, and how the
// read-back and the node's continue setting judge a format that left the data in place.
import { existsSync } from 'node:fs';
import { open, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { eraseDisk, SecureEraseFailed } from '../../agent/disk/erase-disk.ts';
import type { EraseSettings } from '../../agent/disk/erase-settings.ts';
import { samplePlan } from '../../agent/disk/erase-verify.ts';
import { nvmeSecureErase } from '../../agent/disk/nvme-erase.ts';
import { ProtectedDeviceError, ToolError } from '../../agent/errors.ts';
import { nullLogger } from '../../agent/log.ts';
import { ProgressMeter } from '../../agent/progress.ts';
import { DeviceGuard } from '../../agent/safety/device-guard.ts';
import { eraseSettings, loopAsDisk } from '../helpers/erase-case.ts';
import { installFakes, type FakeTools } from '../helpers/fake-tools.ts';
import { FAKE_NVME } from '../helpers/fake-nvme.ts';
import { MiB, withLoops, type LoopDevice } from '../helpers/loop.ts';
import { buildTree, type TreeSpec } from '../helpers/sys-tree.ts';

let fakes: FakeTools | undefined;
const trees: string[] = [];
afterEach(async () => {
  await fakes?.close();
  fakes = undefined;
  await Promise.all(trees.splice(0).map((t) => rm(t, { recursive: true, force: true })));
});

async function sysTree(spec: TreeSpec): Promise<string> {
  const root = await buildTree(spec);
  trees.push(root);
  return root;
}

/** id-ctrl fields as nvme-cli 2.x prints them (a real controller prints ~100 more). */
async function controller(
  idCtrl: Record<string, unknown>,
  behaviour: Record<string, unknown> = {},
): Promise<FakeTools> {
  fakes = await installFakes({ nvme: FAKE_NVME });
  await writeFile(join(fakes.dir, 'id-ctrl.json'), JSON.stringify({ vid: 6989, mn: 'QEMU NVMe Ctrl', ...idCtrl }));
  await writeFile(join(fakes.dir, 'behaviour.json'), JSON.stringify(behaviour));
  return fakes;
}

const opts = { log: nullLogger, erasing: new Set(['nvme0n1']) };

describe('nvme format', () => {
  it('crypto erase (SES 2) when FNA bit 2 says the controller has it', async () => {
    const f = await controller({ oacs: 0x1f, fna: 0x4, sanicap: 0x3 });
    expect(await nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).toBe('nvme crypto erase');
    expect(await f.calls('nvme')).toEqual([
      ['id-ctrl', '/dev/fake-nvme0n1', '-o', 'json'],
      ['format', '/dev/fake-nvme0n1', '-s', '2', '-f'],
    ]);
  });

  it('user-data erase (SES 1) otherwise', async () => {
    const f = await controller({ oacs: 0x2, fna: 0x0, sanicap: 0 });
    expect(await nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).toBe('nvme user-data erase');
    expect((await f.calls('nvme'))[1]).toEqual(['format', '/dev/fake-nvme0n1', '-s', '1', '-f']);
  });

  it('refuses a controller without Format NVM (OACS bit 1), and formats nothing', async () => {
    const f = await controller({ oacs: 0x5, fna: 0x4 });
    await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).rejects.toThrow(
      'nvme-cli did not return any supported format modes for device: /dev/fake-nvme0n1',
    );
    expect((await f.calls('nvme')).length).toBe(1);
  });

  it('reports an empty answer, a failed id-ctrl and a failed format, naming the device', async () => {
    await controller({});
    await writeFile(join(fakes!.dir, 'id-ctrl.json'), '{}');
    await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).rejects.toThrow(
      'nvme-cli did not return any information for device: /dev/fake-nvme0n1',
    );
    await fakes!.close();
    await controller({ oacs: 2 }, { idFails: true });
    await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).rejects.toThrow(
      /Failed to fetch NVMe capabilities for device \/dev\/fake-nvme0n1: .*Invalid Field/,
    );
    await fakes!.close();
    await controller({ oacs: 2 }, { format: 'fail' });
    await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', opts)).rejects.toThrow(
      /Failed to nvme format device \/dev\/fake-nvme0n1: .*INVALID_FORMAT/,
    );
  });

  describe('when FNA says the format reaches every namespace of the NVM subsystem', () => {
    const nqn = 'nqn.2019-08.org.qemu:E2ENVME0\n';
    // One controller, two namespaces: /sys/block/<ns>/device is the controller.
    const oneController = () =>
      sysTree({
        'class/nvme/nvme0/subsysnqn': nqn,
        'class/nvme/nvme0/nvme0n1/size': '2048\n',
        'class/nvme/nvme0/nvme0n2/size': '2048\n',
        'block/nvme0n1': { link: '../class/nvme/nvme0/nvme0n1' },
        'block/nvme0n2': { link: '../class/nvme/nvme0/nvme0n2' },
        'class/nvme/nvme0/nvme0n1/device': { link: '../../nvme0' },
        'class/nvme/nvme0/nvme0n2/device': { link: '../../nvme0' },
      });
    // Native multipath, two controllers of one subsystem: the controllers hold paths (nvme0c0n1, nvme0c1n2),
    // the subsystem holds the heads, and /sys/block/<head>/device is the subsystem.
    const multipath = () =>
      sysTree({
        'class/nvme/nvme0/subsysnqn': nqn,
        'class/nvme/nvme0/nvme0c0n1/size': '2048\n',
        'class/nvme/nvme1/subsysnqn': nqn,
        'class/nvme/nvme1/nvme0c1n2/size': '2048\n',
        'class/nvme/nvme2/subsysnqn': 'nqn.2019-08.org.qemu:OTHER\n',
        'class/nvme/nvme2/nvme1n1/size': '2048\n',
        'class/nvme-subsystem/nvme-subsys0/subsysnqn': nqn,
        'class/nvme-subsystem/nvme-subsys0/nvme0n1/size': '2048\n',
        'class/nvme-subsystem/nvme-subsys0/nvme0n1/device': { link: '../../nvme-subsys0' },
        'block/nvme0n1': { link: '../class/nvme-subsystem/nvme-subsys0/nvme0n1' },
      });

    it('refuses when another namespace of the controller is not erased (FNA bit 1: secure erase), and formats nothing', async () => {
      const f = await controller({ oacs: 2, fna: 0x6 });
      const sys = await oneController();
      await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', { ...opts, sys })).rejects.toThrow(
        'Formatting /dev/fake-nvme0n1 would erase every namespace of its NVM subsystem (FNA 6), including /dev/nvme0n2, which this step does not erase',
      );
      expect((await f.calls('nvme')).map((c) => c[0])).toEqual(['id-ctrl']);
    });

    it('formats when this step erases every namespace (FNA bit 0)', async () => {
      const f = await controller({ oacs: 2, fna: 0x1 });
      const sys = await oneController();
      const both = { ...opts, sys, erasing: new Set(['nvme0n1', 'nvme0n2']) };
      expect(await nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', both)).toBe('nvme user-data erase');
      expect((await f.calls('nvme'))[1]).toEqual(['format', '/dev/fake-nvme0n1', '-s', '1', '-f']);
    });

    it('counts the namespaces of every controller of the subsystem under native multipath, and only those', async () => {
      const f = await controller({ oacs: 2, fna: 0x7 });
      const sys = await multipath();
      await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', { ...opts, sys })).rejects.toThrow(
        'including /dev/nvme0n2, which this step does not erase',
      );
      const both = { ...opts, sys, erasing: new Set(['nvme0n1', 'nvme0n2']) };
      expect(await nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', both)).toBe('nvme crypto erase');
      expect((await f.calls('nvme')).filter((c) => c[0] === 'format').length).toBe(1);
    });

    it('refuses when sysfs does not say which namespaces share the subsystem', async () => {
      const f = await controller({ oacs: 2, fna: 0x1 });
      const sys = await sysTree({ 'class/nvme/nvme0/nvme0n1/size': '2048\n' });
      await expect(nvmeSecureErase('/dev/fake-nvme0n1', 'nvme0n1', { ...opts, sys })).rejects.toThrow(
        'and sysfs does not say which namespaces those are',
      );
      expect((await f.calls('nvme')).map((c) => c[0])).toEqual(['id-ctrl']);
    });
  });

  it('never formats a partition node', async () => {
    const f = await controller({ oacs: 2 });
    await expect(nvmeSecureErase('/dev/nvme0n1p1', 'nvme0n1p1', opts)).rejects.toThrow(/not an NVMe namespace/);
    expect(await f.calls('nvme')).toEqual([]);
  });
});

/** A loop device presented as an NVMe namespace: the name decides the method, the path is what is erased. */
const asNvme = (d: LoopDevice) => loopAsDisk(d, { name: 'nvme0n1', tran: 'nvme' });
const settings = eraseSettings;

async function fill(d: LoopDevice): Promise<void> {
  const fh = await open(d.path, 'r+');
  await fh.write(Buffer.alloc(d.sizeBytes, 0x5a), 0, d.sizeBytes, 0);
  await fh.sync();
  await fh.close();
}

function erase(d: LoopDevice, s: EraseSettings) {
  const services = { guard: new DeviceGuard([d.path]), log: nullLogger };
  return eraseDisk(services, asNvme(d), s, new ProgressMeter(() => {}, nullLogger), new Set(['nvme0n1']));
}

describe('NVMe erase of a disk, judged by the read-back', () => {
  it('a format that erases counts, with its method and a passing read-back', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      await controller({ oacs: 2, fna: 4 }, { format: 'zero' });
      const r = await erase(d!, settings());
      expect(r).toMatchObject({
        method: 'nvme crypto erase',
        bytes: 8 * MiB,
        attempts: [],
        verification: { ok: true, expect: 'changed', regions: 18 },
      });
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('a format that leaves the data fails the disk, naming it, unless the node allows falling back', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      await controller({ oacs: 2, fna: 0 }, { format: 'noop' });
      const err = await erase(d!, settings()).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SecureEraseFailed);
      const message = String((err as Error).message);
      expect(message).toMatch(
        /falling back to overwriting is not enabled.*nvme user-data erase of \/dev\/loop\d+ left data behind: the data at byte \d+ is unchanged \(seed \d+\)/,
      );
      // Nothing was erased: the disk holds its data but for the canaries planted in the sampled regions.
      const { regions } = samplePlan(d!.sizeBytes, Number(/\(seed (\d+)\)/.exec(message)![1]));
      const data = await readFile(d!.path);
      const sampled = (at: number) => regions.some((r) => at >= r.offset && at < r.offset + r.length);
      expect(data.every((b, at) => b === 0x5a || sampled(at))).toBe(true);
      expect(data.subarray(0, MiB).includes(0x5a)).toBe(true);

      const r = await erase(d!, settings({ continueIfSecureEraseFailed: true }));
      expect(r.attempts[0]!.method).toBe('secure erase');
      expect(r.attempts[0]!.error).toMatch(/left data behind/);
      expect(['secure discard', 'discard']).toContain(r.method);
      expect((await readFile(d!.path)).every((b) => b === 0)).toBe(true);
    });
  });

  it('a format that did nothing is caught on an empty disk too (the canaries, not zeros, are what it must erase)', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await controller({ oacs: 2, fna: 0 }, { format: 'noop' });
      const err = await erase(d!, settings()).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(SecureEraseFailed);
      expect(String((err as Error).message)).toMatch(/nvme user-data erase of \/dev\/loop\d+ left data behind/);
    });
  });

  it('a disk mounted while the drive is identified gets neither canaries nor a format (the guard is asked again)', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      const f = await controller({ oacs: 2, fna: 4 }, { format: 'zero' });
      const mountinfo = join(f.dir, 'mountinfo');
      await writeFile(mountinfo, await readFile('/proc/self/mountinfo'));
      await writeFile(join(f.dir, 'behaviour.json'), JSON.stringify({ format: 'zero', mountOnIdentify: mountinfo }));
      const guard = new DeviceGuard([d!.path], {
        mountinfo,
        swaps: '/proc/swaps',
        sysClassBlock: '/sys/class/block',
        sysDevBlock: '/sys/dev/block',
      });
      const meter = new ProgressMeter(() => {}, nullLogger);
      const err = await eraseDisk(
        { guard, log: nullLogger },
        asNvme(d!),
        settings(),
        meter,
        new Set(['nvme0n1']),
      ).catch((e: unknown) => e);
      expect(err).toBeInstanceOf(ProtectedDeviceError);
      expect(String((err as Error).message)).toMatch(
        /^refusing to run an NVMe format on \/dev\/loop\d+: .*mounted at \/mnt\/ina-guard-test/,
      );
      expect(await f.calls('nvme')).toEqual([['id-ctrl', d!.path, '-o', 'json']]);
      expect((await readFile(d!.path)).every((b) => b === 0x5a)).toBe(true);
    });
  });

  it('nvme-cli missing fails the disk even where the node allows falling back, and nothing is erased', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      const path = process.env.PATH;
      process.env.PATH = (path ?? '')
        .split(':')
        .filter((dir) => !existsSync(join(dir, 'nvme')))
        .join(':');
      const err = await erase(d!, settings({ continueIfSecureEraseFailed: true }))
        .catch((e: unknown) => e)
        .finally(() => {
          process.env.PATH = path;
        });
      expect(err).toBeInstanceOf(ToolError);
      expect(String((err as Error).message)).toMatch(/^nvme id-ctrl \/dev\/loop\d+ -o json failed \(not installed\)/);
      expect((await readFile(d!.path)).every((b) => b === 0x5a)).toBe(true);
    });
  });

  it('with NVMe secure erase disabled, the namespace is never formatted', async () => {
    await withLoops([8 * MiB], async ([d]) => {
      await fill(d!);
      const f = await controller({ oacs: 2, fna: 4 }, { format: 'zero' });
      const r = await erase(d!, settings({ nvmeSecureErase: false, discard: false, randomPasses: 0 }));
      expect(r).toMatchObject({ method: 'overwrite', passes: 1, verification: { ok: true, expect: 'zeros' } });
      expect(await f.calls('nvme')).toEqual([]);
    });
  });
});
