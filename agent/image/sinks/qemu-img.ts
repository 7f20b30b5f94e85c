// qemu-img, for buffered images that passed inspection: `convert` straight onto the device with O_DIRECT
// (`-t none`), out-of-order writes and no sparse skipping, under an address-space limit; progress from its
// `-p` output. One flush of the device after the conversion stands in for IPA's `-t directsync`
// (docs/decisions.md).
// The conversion onto the device covers the image between the device's first and last MiB only (the raw
// driver's `offset` and `size` on both sides); those two ends are converted into small files beside the
// buffer, read into memory and written by `commit` once the rest is on the device (held-back.ts), so that
// qemu-img or the agent killed mid-conversion leave no partition table.
import { readFile, rm } from 'node:fs/promises';
import { ImageWriteError, ToolError } from '../../errors.ts';
import { assertStarted, reason, startTool, type Tool } from '../../exec.ts';
import { INSPECT_HEAD_BYTES } from '../inspect.ts';
import { flushDevice } from '../settle.ts';
import type { DeviceTarget } from './device-target.ts';
import { HeldBack } from './held-back.ts';
import type { Sink, SinkResult } from './sink.ts';

/** A node of qemu's --image-opts: the raw driver over `child`, `size` bytes from `offset`. */
function window(offset: number, size: number, child: Record<string, string>): string {
  const opts = { driver: 'raw', offset: String(offset), size: String(size), ...child };
  // In qemu's option syntax a comma inside a value is written twice.
  return Object.entries(opts)
    .map(([k, v]) => `${k}=${v.replaceAll(',', ',,')}`)
    .join(',');
}

const MEMORY_ERRORS = /Cannot allocate memory|Resource temporarily unavailable/;

/** The inspected buffer file qemu-img reads itself. */
export interface InspectedFile {
  file: string;
  format: string;
  virtualSize: number;
}

export class QemuImgSink implements Sink<InspectedFile> {
  readonly name = 'qemu-img';
  readonly headBytes = 0;
  private child: Tool | null = null;
  private virtualSize = 0;
  private held: HeldBack | null = null;

  constructor(
    private readonly target: DeviceTarget,
    private readonly memoryLimitMiB: number,
    /** Bytes converted so far, as qemu-img's percentage tells. */
    private readonly onProgress: (bytes: number) => void,
    /** The command's cancellation: qemu-img is killed, and write() settles once it has exited. */
    private readonly signal?: AbortSignal,
  ) {}

  /** The head was inspected with the whole file; the device is cleared before qemu-img starts. */
  checkHead(): Promise<void> {
    return this.target.prepare();
  }

  async write(input: InspectedFile): Promise<void> {
    const { guard, path: device } = this.target;
    this.virtualSize = input.virtualSize;
    const held = new HeldBack(this.target.device.size);
    this.held = held;
    const image = { 'file.driver': input.format, 'file.file.driver': 'file', 'file.file.filename': input.file };
    // qemu counts an image in whole sectors (a qcow2 whose header says 2 MiB + 100 is 2 MiB to it, as a whole
    // convert writes it), and its raw driver refuses a window whose size is not a multiple of 512.
    const size = input.virtualSize - (input.virtualSize % 512);
    const middleEnd = Math.min(size, held.tailStart);
    if (middleEnd > held.headEnd) {
      const middle = middleEnd - held.headEnd;
      this.signal?.throwIfAborted();
      await guard.assertWritable(device, 'convert an image onto');
      const onto = { 'file.driver': 'host_device', 'file.filename': device };
      const args = ['-t', 'none', '-S', '0', '-W', '-n'];
      await this.convert(
        [...args, '--image-opts', window(held.headEnd, middle, image), '--target-image-opts'],
        window(held.headEnd, middle, onto),
        (percent) => this.onProgress(held.headEnd + Math.round((middle * percent) / 100)),
      );
    }
    // The ends, which the device gets last, through files of at most a MiB each.
    const ends: [number, number][] = [[0, Math.min(size, held.headEnd)]];
    if (size > held.tailStart) ends.push([held.tailStart, size - held.tailStart]);
    for (const [offset, length] of ends) {
      const file = `${input.file}.${offset === 0 ? 'head' : 'tail'}`;
      try {
        await this.convert(['-O', 'raw', '--image-opts', window(offset, length, image)], file, () => undefined);
        held.take(offset, await readFile(file));
      } finally {
        await rm(file, { force: true });
      }
    }
    this.onProgress(input.virtualSize);
  }

  /** One `qemu-img convert [...args] <output>` under the address-space limit; `onPercent` gets its progress. */
  private async convert(args: string[], output: string, onPercent: (percent: number) => void): Promise<void> {
    const { log, path: device } = this.target;
    const all = [`--as=${this.memoryLimitMiB * 1024 * 1024}`, '--', 'qemu-img', 'convert', '-p', ...args, output];
    this.signal?.throwIfAborted();
    log.info({ cmd: `prlimit ${all.join(' ')}` }, 'converting image');
    const child = startTool('prlimit', all, {
      env: { MALLOC_ARENA_MAX: '3', LC_ALL: 'C' },
      stdin: 'ignore',
      ...(this.signal ? { signal: this.signal } : {}),
    });
    this.child = child;
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      const last = [...text.matchAll(/\((\d+(?:\.\d+)?)\/100%\)/g)].at(-1);
      if (last) onPercent(Number(last[1]));
    });
    try {
      const exit = await child.exit;
      if (exit.code === 0) return;
      this.signal?.throwIfAborted();
      assertStarted(exit);
      // prlimit's own status when it cannot execute qemu-img: a fault of the ramdisk, not of the image.
      if (exit.code === 126 || exit.code === 127) throw new ToolError(`qemu-img could not be started: ${reason(exit)}`);
      const stderr = exit.stderr.slice(0, 2000);
      throw new ImageWriteError(
        `Writing image to device ${device} failed with exit code ${exit.code ?? 'unknown'}. stderr: ${reason(exit)}`,
        { transient: MEMORY_ERRORS.test(stderr) },
      );
    } finally {
      this.child = null;
    }
  }

  async finish(): Promise<SinkResult> {
    await flushDevice(this.target.path, this.target.guard);
    return { bytes: this.virtualSize, head: this.held!.imageHead(INSPECT_HEAD_BYTES) };
  }

  /** The image's first and last MiB, once the rest is on the device and verified. */
  commit(): Promise<void> {
    return this.held!.commit(this.target.path, this.target.guard);
  }

  async release(): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill();
    await child.exit;
  }

  wipe(): Promise<void> {
    return this.target.wipe();
  }
}
