// One disk erase called directly (no API): a loop device presented as the block device the agent listed, and
// the erase settings a node would send, each test changing only what it is about.
import type { BlockDevice } from '../../agent/disk/block-devices.ts';
import type { EraseSettings } from '../../agent/disk/erase-settings.ts';
import type { LoopDevice } from './loop.ts';

/** The loop device as a listed disk; `over` changes its name (which decides the method) or its transport. */
export function loopAsDisk(d: LoopDevice, over: Partial<BlockDevice> = {}): BlockDevice {
  return {
    name: d.path.replace('/dev/', ''),
    path: d.path,
    size: d.sizeBytes,
    model: null,
    vendor: null,
    serial: null,
    wwn: null,
    wwnWithExtension: null,
    wwnVendorExtension: null,
    rotational: false,
    hctl: null,
    byPath: null,
    logicalSectorSize: 512,
    physicalSectorSize: 512,
    type: 'disk',
    tran: null,
    readOnly: false,
    ...over,
  };
}

/** IPA's defaults: both secure erases on, no falling back, one random pass and a zero pass. */
export const eraseSettings = (over: Partial<EraseSettings> = {}): EraseSettings => ({
  nvmeSecureErase: true,
  ataSecureErase: true,
  continueIfSecureEraseFailed: false,
  randomPasses: 1,
  finalZeroPass: true,
  concurrency: 1,
  skipReadOnly: false,
  discard: true,
  ...over,
});
