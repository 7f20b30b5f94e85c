// The agent's command line for the scripts that run it on this machine (bench, the cgroup proof): standalone
// (no conductor, no kernel command line), on an ephemeral loopback port, allowed to write one device only.
export function standaloneArgs(device: string, bufferDir: string): string[] {
  return [
    '--standalone',
    '--kernel-cmdline=/dev/null',
    '--ipa-listen-host=127.0.0.1',
    '--ipa-listen-port=0',
    `--device-allowlist=${device}`,
    `--ipa-image-buffer-dir=${bufferDir}`,
  ];
}
