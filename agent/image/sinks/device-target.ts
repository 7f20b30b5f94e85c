// What every sink that writes a device shares: the device guard, the head check of a stream onto it (a
// container format that claims to be raw is refused, since raw bytes are copied and never given to
// qemu-img; a plain download declared larger than the device is refused), clearing old signatures before
// the first byte (with the write journal's note that the device is being written), and the wipe after a failure.
import { AgentError, ImageWriteError, errorText } from '../../errors.ts';
import type { Logger } from '../../log.ts';
import type { DeviceGuard } from '../../safety/device-guard.ts';
import { refuseUnsafe } from '../gates.ts';
import { INSPECT_HEAD_BYTES, inspectImage } from '../inspect.ts';
import { clearSignatures } from '../../disk/signatures.ts';
import type { HeadFacts, SinkTarget } from './sink.ts';
import { WriteJournal } from './write-journal.ts';

export class DeviceTarget {
  constructor(
    readonly device: SinkTarget,
    readonly guard: DeviceGuard,
    readonly log: Logger,
    private readonly journal: WriteJournal = new WriteJournal(undefined),
  ) {}

  get path(): string {
    return this.device.path;
  }

  /** How many leading image bytes a sink streaming onto this target shows its checks. */
  get headBytes(): number {
    return Math.max(INSPECT_HEAD_BYTES, this.device.precheck ? (this.device.precheckHeadBytes ?? 0) : 0);
  }

  /** The checks of a streamed head (and the target's own precheck); throws before anything on the device changes. */
  async refuseStreamedHead(head: Buffer, facts: HeadFacts): Promise<void> {
    const found = inspectImage(head);
    if (found.format !== 'raw') refuseUnsafe(found, 'raw', ['raw'], true);
    if (facts.compression === 'none' && facts.totalBytes !== undefined && facts.totalBytes > this.device.size) {
      throw new ImageWriteError(
        `the image (${facts.totalBytes} bytes) is larger than ${this.path} (${this.device.size} bytes)`,
        {
          tooLarge: true,
        },
      );
    }
    await this.device.precheck?.({ head, partial: true, totalBytes: facts.totalBytes });
  }

  /** Before a write: notes it in the journal, then clears the device (`clear`). */
  async prepare(): Promise<void> {
    this.journal.begin(this.path, this.device.size);
    try {
      await this.clear();
    } catch (err) {
      // Nothing of the image was written: a note left behind would have the next start wipe this disk.
      this.journal.end();
      throw err;
    }
  }

  /** After a failed write: clears the device; the journal's note goes once that succeeded. */
  async wipe(): Promise<void> {
    await this.clear();
    this.journal.end();
  }

  /** The image is on the device with its table settled: the write is no longer unfinished. */
  done(): void {
    this.journal.end();
  }

  /** Clears partition-table and filesystem signatures and the first and last MiB. */
  async clear(): Promise<void> {
    try {
      await clearSignatures(this.path, this.device.size, this.guard, this.log);
    } catch (err) {
      if (err instanceof AgentError) throw err;
      throw new ImageWriteError(`cannot clear the signatures of ${this.path}: ${errorText(err)}`);
    }
  }
}
