// The inventory readers' view of the machine is the agent's one /sys reader (agent/host/sysfs.ts).
export { HostRoot, liveRoot } from '../host/sysfs.ts';
