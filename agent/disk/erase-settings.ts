// The erase settings of one cleaning run. Ironic sends them in node.driver_internal_info with every
// execute_clean_step (not as step args); a missing key takes IPA's default, and the agent's own
// ipa-erase-* options stand in where IPA has none to offer (shred's passes when Ironic sent nothing).
import type { AgentServices } from '../services.ts';

export interface EraseSettings {
  nvmeSecureErase: boolean;
  ataSecureErase: boolean;
  /** A failed NVMe/ATA secure erase falls back to discard/overwrite instead of failing the disk. */
  continueIfSecureEraseFailed: boolean;
  randomPasses: number;
  finalZeroPass: boolean;
  /** Disks erased at once. */
  concurrency: number;
  skipReadOnly: boolean;
  /** Try discard (verified) before overwriting. An agent option: IPA never discards. */
  discard: boolean;
}

const bool = (v: unknown): boolean | undefined => (typeof v === 'boolean' ? v : undefined);
const count = (v: unknown, min: number): number | undefined =>
  Number.isInteger(v) && (v as number) >= min ? (v as number) : undefined;

export function eraseSettings(services: Pick<AgentServices, 'config' | 'state'>): EraseSettings {
  const info = services.state.status.node?.driver_internal_info ?? {};
  const cfg = services.config.erase;
  return {
    nvmeSecureErase: bool(info.agent_enable_nvme_secure_erase) ?? true,
    ataSecureErase: bool(info.agent_enable_ata_secure_erase) ?? true,
    // The deprecated ATA-only key still counts when the newer one is absent, as in IPA.
    continueIfSecureEraseFailed:
      bool(info.agent_continue_if_secure_erase_failed) ?? bool(info.agent_continue_if_ata_erase_failed) ?? false,
    randomPasses: count(info.agent_erase_devices_iterations, 0) ?? cfg.randomPasses,
    finalZeroPass: bool(info.agent_erase_devices_zeroize) ?? cfg.finalZeroPass,
    concurrency: count(info.disk_erasure_concurrency, 1) ?? 1,
    skipReadOnly: bool(info.agent_erase_skip_read_only) ?? false,
    discard: cfg.discardFirst,
  };
}
