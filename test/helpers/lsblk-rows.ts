// One row of `lsblk -J -b` output as the agent asks for it (agent/disk/block-devices.ts), for tests that feed the
// disk list a fake lsblk: a virtio-like device with no identity, and whatever a test sets on top.
export function lsblkRow(kname: string, type: string, size: number, over: Record<string, unknown> = {}) {
  return {
    kname,
    path: `/dev/${kname}`,
    size,
    model: null,
    vendor: null,
    serial: null,
    wwn: null,
    rota: false,
    hctl: null,
    'log-sec': 512,
    'phy-sec': 512,
    type,
    tran: null,
    ro: false,
    ...over,
  };
}
