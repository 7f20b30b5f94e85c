// Per-disk progress while disks are erased in parallel: each disk has its own meter, and the running
// command's `command_result` shows all of them at once, `{phase: 'erase', disks: {<dev>: {…}}}`.
import type { Logger } from '../log.ts';
import { ProgressMeter, type ProgressReport } from '../progress.ts';

export class EraseBoard {
  private readonly disks: Record<string, Record<string, unknown>> = {};

  constructor(
    private readonly publish: (report: unknown) => void,
    private readonly log: Logger,
    devices: string[],
  ) {
    for (const d of devices) this.disks[d] = { phase: 'waiting' };
  }

  meter(device: string): ProgressMeter {
    return new ProgressMeter((r: ProgressReport) => this.set(device, r), this.log, `erase of ${device}:`);
  }

  set(device: string, report: Record<string, unknown>): void {
    this.disks[device] = report;
    this.publish({ phase: 'erase', disks: { ...this.disks } });
  }
}
