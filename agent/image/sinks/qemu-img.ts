// qemu-img, for buffered images that passed inspection: `convert` straight onto the device with O_DIRECT
// (`-t none`), out-of-order writes and no sparse skipping, under an address-space limit; progress from its
// `-p` output. One flush of the device after the conversion stands in for IPA's `-t directsync`
// (docs/decisions.md).
import { open } from 'node:fs/promises';
import { ImageWriteError } from '../../errors.ts';
import { mortal, spawnTool } from '../../exec.ts';
import { INSPECT_HEAD_BYTES } from '../inspect.ts';
import { flushDevice } from '../settle.ts';
import type { DeviceTarget } from './device-target.ts';
import type { Sink, SinkResult } from './sink.ts';

const MEMORY_ERRORS = /Cannot allocate memory|Resource temporarily unavailable/;

/** The inspected buffer file qemu-img reads itself. */
export interface InspectedFile {
  file: string;
  format: string;
  virtualSize: number;
}

interface ToolFailure {
  exitCode?: number;
  stderr?: string;
  shortMessage?: string;
}

export class QemuImgSink implements Sink<InspectedFile> {
  readonly name = 'qemu-img';
  readonly headBytes = 0;
  private child: ReturnType<typeof spawnTool> | null = null;
  private virtualSize = 0;

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
    return this.target.clear();
  }

  async write(input: InspectedFile): Promise<void> {
    const { guard, log, path: device } = this.target;
    this.virtualSize = input.virtualSize;
    const args = [
      `--as=${this.memoryLimitMiB * 1024 * 1024}`,
      '--',
      'qemu-img',
      'convert',
      '-p',
      '-f',
      input.format,
      '-O',
      'host_device',
      '-t',
      'none',
      '-S',
      '0',
      '-W',
      input.file,
      device,
    ];
    this.signal?.throwIfAborted();
    await guard.assertWritable(device, 'convert an image onto');
    log.info({ cmd: `prlimit ${args.join(' ')}` }, 'converting image');
    const child = spawnTool(...mortal('prlimit', args), {
      env: { MALLOC_ARENA_MAX: '3', LC_ALL: 'C' },
      buffer: { stdout: false, stderr: true },
      stdin: 'ignore',
      ...(this.signal ? { cancelSignal: this.signal, forceKillAfterDelay: 2000 } : {}),
    });
    this.child = child;
    child.stdout?.setEncoding('utf8').on('data', (text: string) => {
      const last = [...text.matchAll(/\((\d+(?:\.\d+)?)\/100%\)/g)].at(-1);
      if (last) this.onProgress(Math.round((input.virtualSize * Number(last[1])) / 100));
    });
    try {
      await child;
    } catch (err) {
      this.signal?.throwIfAborted();
      const f = err as ToolFailure;
      const stderr = String(f.stderr ?? '')
        .trim()
        .slice(0, 2000);
      throw new ImageWriteError(
        `Writing image to device ${device} failed with exit code ${f.exitCode ?? 'unknown'}. stderr: ${stderr || f.shortMessage}`,
        { transient: MEMORY_ERRORS.test(stderr) },
      );
    } finally {
      this.child = null;
    }
  }

  async finish(): Promise<SinkResult> {
    await flushDevice(this.target.path, this.target.guard);
    const fh = await open(this.target.path, 'r');
    try {
      const head = Buffer.alloc(INSPECT_HEAD_BYTES);
      const { bytesRead } = await fh.read(head, 0, head.length, 0);
      return { bytes: this.virtualSize, head: head.subarray(0, bytesRead) };
    } finally {
      await fh.close();
    }
  }

  async release(): Promise<void> {
    const child = this.child;
    if (!child) return;
    child.kill();
    await child.catch(() => undefined);
  }

  wipe(): Promise<void> {
    return this.target.clear();
  }
}
