// The qemu-img sink's verdict when its tools cannot run: a missing qemu-img (prlimit's 127) or prlimit is a
// ToolError, a fault of the ramdisk, not an ImageWriteError on the image. An image within the device's first MiB
// is converted into a file only (the held-back head), so no device is needed; the same call with both tools
// present succeeds, so the failures below are the tools' absence.
import { randomBytes } from 'node:crypto';
import { mkdir, mkdtemp, rm, symlink, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execa } from 'execa';
import pino from 'pino';
import { afterAll, beforeAll, expect, it } from 'vitest';
import { ToolError } from '../../../agent/errors.ts';
import { DeviceGuard } from '../../../agent/safety/device-guard.ts';
import { DeviceTarget } from '../../../agent/image/sinks/device-target.ts';
import { QemuImgSink } from '../../../agent/image/sinks/qemu-img.ts';
import { withPath } from '../../helpers/fake-tools.ts';

const MiB = 1024 * 1024;
let dir: string;
let image: string;
const bytes = randomBytes(512 * 1024);
beforeAll(async () => {
  dir = await mkdtemp(join(tmpdir(), 'ina-qemu-img-sink-'));
  image = join(dir, 'image.raw');
  await writeFile(image, bytes);
});
afterAll(async () => rm(dir, { recursive: true, force: true }));

function sink(): QemuImgSink {
  const target = new DeviceTarget(
    { path: join(dir, 'no-device'), size: 64 * MiB, logicalSectorSize: 512 },
    new DeviceGuard([]),
    pino({ level: 'silent' }),
  );
  return new QemuImgSink(target, 1024, () => undefined);
}

const input = () => ({ file: image, format: 'raw', virtualSize: bytes.length });

it('with both tools present, converts an image that fits in the held-back head', async () => {
  await expect(sink().write(input())).resolves.toBeUndefined();
});

it('without qemu-img (prlimit cannot execute it): a ToolError', async () => {
  const bin = join(dir, 'bin-no-qemu-img');
  await mkdir(bin);
  const { stdout: prlimit } = await execa('sh', ['-c', 'command -v prlimit']);
  await symlink(prlimit, join(bin, 'prlimit'));
  const failure = withPath(bin, () => sink().write(input()));
  await expect(failure).rejects.toBeInstanceOf(ToolError);
  await expect(failure).rejects.toThrow(/qemu-img could not be started/);
});

it('without prlimit: a ToolError', async () => {
  const failure = withPath('/nonexistent', () => sink().write(input()));
  await expect(failure).rejects.toBeInstanceOf(ToolError);
  await expect(failure).rejects.toThrow(/prlimit could not be started/);
});
