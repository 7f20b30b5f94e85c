// The agent's one typed configuration, built once at start from the kernel command line, IPA's configuration
// files and flags. Every IPA kernel parameter we understand is also a flag of the same name. As in IPA, the
// files override the kernel command line and flags override both.
import { readFileSync } from 'node:fs';
import { type ConfFiles, readConfFiles } from './conf-files.ts';
import { parseFlags, parseKernelCmdline } from './sources.ts';
import { ConfigError, ParamReader } from './reader.ts';

export type HashAlgo = 'md5' | 'sha256' | 'sha512';
export type TlsVersion = '1.2' | '1.3';

export interface Config {
  apiUrls: string[];
  standalone: boolean;
  debug: boolean;
  globalRequestId?: string;
  listen: { host: string; port: number };
  advertise: { host?: string; port: number; protocol: 'http' | 'https' };
  networkInterface?: string;
  bootifMac?: string;
  /** BOOTIF exactly as given (`01-aa-bb-…`): inspection reports it unchanged, as IPA does. */
  bootif?: string;
  inspection: {
    /** Where to post the inventory: ipa-inspection-callback-url, or derived from ipa-api-url. Empty: no inspection. */
    callbackUrls: string[];
    collectors: string[];
    /** Total time for posting the inventory, retries included. */
    timeoutS: number;
    dhcpWaitS: number;
    dhcpAllInterfaces: boolean;
    /** ipa-collect-lldp: LLDP TLVs in `interfaces[].lldp` of the inventory. */
    collectLldp: boolean;
    lldpTimeoutS: number;
  };
  tls: {
    insecure: boolean;
    caFile?: string;
    minVersion: TlsVersion;
    cipherSuites?: string;
    certificateCurve: 'p256' | 'p384' | 'p521';
    autoTls: boolean;
  };
  token: { agentToken?: string; requireOnGet: boolean };
  lookup: {
    timeoutS: number;
    intervalS: number;
    ipLookupAttempts: number;
    ipLookupSleepS: number;
    httpRequestTimeoutS: number;
    ironicApiVersion?: string;
    nicWaitS: number;
  };
  hardwareInitDelayS: number;
  /**
   * IPA parameters, and options of its configuration files, that were given but that the agent does not act
   * on; main.ts warns about them once.
   */
  notActedOn: string[];
  disks: {
    allowlist: string[] | null;
    skipBlockDevices: string[];
    /** ipa-guard-special-filesystems: the metadata and express erases refuse disks of shared filesystems. */
    guardSpecialFilesystems: boolean;
    /** ipa-disk-wait-attempts / -delay: at start, how often and how far apart to look for an install disk. */
    waitAttempts: number;
    waitDelayS: number;
  };
  /** ipa-enable-vlan-interfaces: `all`, `<nic>` or `<nic>.<vid>` entries (agent/inspect/vlans.ts). */
  vlanInterfaces: string[];
  /** ipa-inject-files-priority: the priority get_deploy_steps gives inject_files (0: only when asked). */
  injectFilesPriority: number;
  image: {
    connectTimeoutS: number;
    retries: number;
    retryIntervalS: number;
    maxDurationS: number;
    md5Enabled: boolean;
    permittedFormats: string[];
    disableDeepInspection: boolean;
    convertMemoryLimitMiB: number;
    bufferDir: string;
    /** RAM the streamed qcow2 reader may hold for data that arrives before its table (0: never stream qcow2). */
    qcow2SpoolMiB: number;
  };
  erase: { randomPasses: number; finalZeroPass: boolean; discardFirst: boolean };
  hostActions: 'simulated' | 'real';
  /** ipa-ntp-server: the clock is set from it at start (host/clock-sync.ts). */
  ntpServer?: string;
  simulatedRebootDelayS: number;
  /** Where rescue writes the rescue password and user: `/` in a ramdisk; outside one only if given. */
  rescueRoot?: string;
  /**
   * The debug login of IPA's images (DIB's dynamic-login element): `sshkey` becomes root's only authorized key,
   * `rootpwd` (a crypt(3) hash, base64-encoded unless it starts with `$`) root's password; host/debug-login.ts.
   * A malformed value is left out and named in `refused` (logged at start) rather than stopping the agent: a typo
   * in a debugging aid must not keep the node from being deployed or cleaned.
   */
  debugLogin: { sshKey?: string; rootPasswordHash?: string; refused?: string[] };
  /**
   * The root under which erase_pstore reads `proc/mounts` and clean_uefi_nvram's efibootmgr finds
   * `sys/firmware/efi/efivars`: `/` in a ramdisk; outside one only if given (tests hand in a fake root).
   */
  firmwareRoot?: string;
  /** ina-hardware-managers: the folder of hardware manager plugins (agent/steps/plugins.ts); the ramdisk's by default. */
  hardwareManagersDir?: string;
  logFile?: string;
  statusFile?: string;
  console: { device?: string; shell: boolean };
  ignoreBootloaderFailure: boolean;
  /**
   * Whether install_bootloader may run the deployed image's own grub-install (and grub-mkconfig) in a chroot of it,
   * as software RAID under BIOS needs: tenant code run as root in the ramdisk, hence off by default (CVE-2026-43003).
   * Set here (ipa-enable-bios-bootloader-install) or by a lookup reply's `enable_bios_bootloader_install: true`.
   */
  enableBiosBootloaderInstall: boolean;
}

const API_URL = /^(mdns|https?:\/\/.+)$/;
/**
 * The least `ipa-image-convert-memory-limit` (an address-space limit) under which qemu-img can convert a
 * qcow2 onto a device; below it conversions abort. docs/safety.md says how it was measured.
 */
export const QEMU_IMG_MIN_MIB = 384;

/**
 * IPA parameters a kernel command line may carry that the agent accepts without acting on them, each with why
 * (docs/ipa-compat.md has the whole table). main.ts warns about each one given, once, at start.
 */
export const NOT_ACTED_ON: Readonly<Record<string, string>> = {
  'ipa-use-mdns': 'finding the conductor by mDNS is not supported; give ipa-api-url',
  'ipa-inspection-benchmarks': 'the extra-hardware collector and its benchmarks are not implemented',
  'ipa-fail-if-clock-not-set': 'a failed clock sync is logged and the agent goes on',
  'ipa-auto-tls-allowed-clock-skew': "the auto-TLS certificate always allows IPA's default skew of one hour",
  'ipa-listen-tls': 'TLS with an operator-supplied certificate is not implemented; auto-TLS is',
  'ipa-tls-cert-file': 'TLS with an operator-supplied certificate is not implemented; auto-TLS is',
  'ipa-tls-key-file': 'TLS with an operator-supplied certificate is not implemented; auto-TLS is',
  'ipa-certfile': 'client certificates toward Ironic are not implemented',
  'ipa-keyfile': 'client certificates toward Ironic are not implemented',
  'ipa-agent-token-required': 'IPA ignores it too: a token once issued is always required',
};

const NO_FILES: ConfFiles = { values: new Map(), otherSections: [] };

export function buildConfig(
  kernel: ReadonlyMap<string, string>,
  flags: ReadonlyMap<string, string>,
  files: ConfFiles = NO_FILES,
): Config {
  const fromFiles = [...files.values].map(([name, v]) => [name, v.value] as const);
  const merged = new Map([...kernel, ...fromFiles, ...flags]);
  const r = new ParamReader(merged, (name) =>
    flags.has(name) ? `flag --${name}` : (files.values.get(name)?.origin ?? `kernel parameter ${name}`),
  );

  const apiUrls = r.list('ipa-api-url').map((u) => u.replace(/\/+$/, ''));
  for (const u of apiUrls) r.check('ipa-api-url', u, API_URL.test(u), 'expected http(s)://host[:port][/path] or mdns');
  const allow = r.list('device-allowlist');
  for (const d of allow) r.check('device-allowlist', d, d.startsWith('/dev/'), 'expected /dev/... paths');

  const config: Config = {
    apiUrls,
    // `standalone` as a flag; IPA's kernel parameter is ipa-standalone.
    standalone: r.bool('standalone', r.bool('ipa-standalone', false)),
    debug: r.bool('ipa-debug', false),
    globalRequestId: r.str('ipa-global-request-id'),
    listen: {
      host: r.str('ipa-listen-host', '::'),
      port: r.num('ipa-listen-port', 9999, { integer: true, min: 0, max: 65535 }),
    },
    advertise: {
      host: r.str('ipa-advertise-host'),
      port: r.num('ipa-advertise-port', 9999, { integer: true, min: 1, max: 65535 }),
      protocol: r.oneOf('ipa-advertise-protocol', ['http', 'https'] as const, 'http'),
    },
    networkInterface: r.str('ipa-network-interface'),
    bootifMac: parseBootif(r.str('BOOTIF')),
    bootif: r.str('BOOTIF'),
    inspection: inspectionConfig(r, apiUrls),
    tls: {
      insecure: r.bool('ipa-insecure', false),
      caFile: r.str('ipa-cafile'),
      minVersion: r.oneOf('ipa-tls-min-version', ['1.2', '1.3'] as const, '1.2'),
      cipherSuites: r.str('ipa-tls-cipher-suites'),
      certificateCurve: r.oneOf('ipa-tls-certificate-curve', ['p256', 'p384', 'p521'] as const, 'p384'),
      autoTls: r.bool('ipa-enable-auto-tls', true),
    },
    token: {
      agentToken: r.str('ipa-agent-token'),
      requireOnGet: r.bool('ipa-require-token-on-get', false),
    },
    lookup: {
      timeoutS: r.num('ipa-lookup-timeout', 600, { min: 0 }),
      intervalS: r.num('ipa-lookup-interval', 1, { min: 0 }),
      ipLookupAttempts: r.num('ipa-ip-lookup-attempts', 6, { integer: true, min: 1 }),
      ipLookupSleepS: r.num('ipa-ip-lookup-timeout', 10, { min: 0 }),
      httpRequestTimeoutS: r.num('ipa-http-request-timeout', 30, { min: 1 }),
      ironicApiVersion: r.str('ipa-ironic-api-version'),
      nicWaitS: r.num('ipa-nic-wait-timeout', 60, { min: 0 }),
    },
    hardwareInitDelayS: r.num('ipa-hardware-initialization-delay', 0, { min: 0 }),
    notActedOn: Object.entries(NOT_ACTED_ON)
      .filter(([name]) => r.given(name))
      .map(([name, why]) => `${files.values.get(name)?.origin ?? name} (${why})`),
    disks: {
      allowlist: allow.length > 0 ? allow : null,
      skipBlockDevices: r.list('ipa-skip-block-devices'),
      guardSpecialFilesystems: r.bool('ipa-guard-special-filesystems', true),
      waitAttempts: r.num('ipa-disk-wait-attempts', 10, { integer: true, min: 0 }),
      waitDelayS: r.num('ipa-disk-wait-delay', 3, { min: 0 }),
    },
    vlanInterfaces: r.list('ipa-enable-vlan-interfaces'),
    injectFilesPriority: r.num('ipa-inject-files-priority', 0, { integer: true, min: 0, max: 99 }),
    image: {
      connectTimeoutS: r.num('ipa-image-download-connection-timeout', 60, { min: 0.1 }),
      retries: r.num('ipa-image-download-connection-retries', 9, { integer: true, min: 0 }),
      retryIntervalS: r.num('ipa-image-download-connection-retry-interval', 10, { min: 0 }),
      maxDurationS: r.num('ipa-image-download-max-duration', 0, { min: 0 }),
      md5Enabled: r.bool('ipa-md5-enabled', true),
      permittedFormats: r.list('ipa-permitted-image-formats', ['raw', 'qcow2']),
      disableDeepInspection: r.bool('ipa-disable-deep-image-inspection', false),
      convertMemoryLimitMiB: r.num('ipa-image-convert-memory-limit', 2048, {
        integer: true,
        min: QEMU_IMG_MIN_MIB,
        why: 'qemu-img cannot convert an image in less address space (MiB), see docs/safety.md',
      }),
      bufferDir: r.str('ipa-image-buffer-dir', '/tmp'),
      qcow2SpoolMiB: r.num('ina-qcow2-stream-spool', 64, { integer: true, min: 0 }),
    },
    erase: {
      randomPasses: r.num('ipa-erase-random-passes', 1, { integer: true, min: 0 }),
      finalZeroPass: r.bool('ipa-erase-final-zero-pass', true),
      discardFirst: r.bool('ipa-erase-discard', true),
    },
    hostActions: r.oneOf('host-actions', ['simulated', 'real'] as const, 'simulated'),
    ntpServer: r.str('ipa-ntp-server'),
    simulatedRebootDelayS: r.num('simulated-reboot-delay', 2, { min: 0 }),
    rescueRoot: r.str('ina-rescue-root') ?? (merged.get('host-actions') === 'real' ? '/' : undefined),
    debugLogin: debugLoginConfig(r),
    firmwareRoot: r.str('ina-firmware-root') ?? (merged.get('host-actions') === 'real' ? '/' : undefined),
    hardwareManagersDir:
      r.str('ina-hardware-managers') ??
      (merged.get('host-actions') === 'real' ? '/etc/ironic-node-agent/hardware-managers' : undefined),
    logFile: r.str('log-file'),
    statusFile: r.str('status-file'),
    console: { device: r.str('console-device'), shell: r.bool('ina-console-shell', false) },
    ignoreBootloaderFailure: r.bool('ipa-ignore-bootloader-failure', false),
    enableBiosBootloaderInstall: r.bool('ipa-enable-bios-bootloader-install', false),
  };
  for (const name of ['kernel-cmdline', 'config-file', 'config-dir']) r.str(name);

  config.notActedOn.push(
    ...r.unread(files.values.keys()).map((name) => files.values.get(name)!.origin),
    // IPA ignores a kernel parameter it does not know; a misspelt one then changes nothing without a word.
    ...r
      .unread(kernel.keys())
      .filter((name) => name.startsWith('ipa-') && !files.values.has(name) && !flags.has(name))
      .map((name) => `kernel parameter ${name} (not an IPA parameter this agent knows)`),
    ...files.otherSections.map((option) => `option ${option}`),
  );
  const unknown = r.unread(flags.keys());
  if (unknown.length > 0) throw new ConfigError(`unknown flag --${unknown[0]}`);
  if (!config.standalone && apiUrls.length === 0 && config.inspection.callbackUrls.length === 0) {
    throw new ConfigError(
      'no conductor: give ipa-api-url or ipa-inspection-callback-url (kernel parameter or flag) or --standalone',
    );
  }
  return config;
}

const COLLECTOR_NAME = /^[a-z0-9-]+$/;
/** One OpenSSH public key line: its type, the base64 key, an optional comment; options are not taken. */
const SSH_PUBLIC_KEY =
  /^(ssh-(ed25519|rsa|dss)|ecdsa-sha2-nistp(256|384|521)|sk-[a-z0-9@.-]+) [A-Za-z0-9+/]+={0,2}( [^\n]*)?$/;
/** A crypt(3) hash as chpasswd -e takes it: `$id$…`, nothing that would break a line of /etc/shadow. */
const CRYPT = /^\$[0-9a-z]+\$[^:\s]+$/;

function debugLoginConfig(r: ParamReader): Config['debugLogin'] {
  const login: Config['debugLogin'] = {};
  const refused: string[] = [];
  const sshKey = r.str('sshkey');
  if (sshKey !== undefined) {
    if (SSH_PUBLIC_KEY.test(sshKey)) login.sshKey = sshKey;
    else
      refused.push(
        `sshkey=${JSON.stringify(sshKey)}: expected one quoted public key, sshkey="ssh-ed25519 AAAA… comment"`,
      );
  }
  const rootpwd = r.str('rootpwd');
  if (rootpwd !== undefined) {
    // As DIB: base64 spares the operator escaping every `$` of the hash (`openssl passwd -6 | base64 -w 0`).
    const hash = rootpwd.startsWith('$') ? rootpwd : Buffer.from(rootpwd, 'base64').toString('latin1');
    if (CRYPT.test(hash)) login.rootPasswordHash = hash;
    // Its value is never echoed: it may be a password typed in clear.
    else refused.push('rootpwd: expected a crypt(3) hash ($6$…), or one in base64');
  }
  if (refused.length > 0) login.refused = refused;
  return login;
}

function inspectionConfig(r: ParamReader, apiUrls: readonly string[]): Config['inspection'] {
  const given = r.list('ipa-inspection-callback-url').map((u) => u.replace(/\/+$/, ''));
  for (const u of given) r.check('ipa-inspection-callback-url', u, API_URL.test(u), 'expected http(s)://… or mdns');
  const collectors = r.list('ipa-inspection-collectors');
  for (const c of collectors)
    r.check('ipa-inspection-collectors', c, COLLECTOR_NAME.test(c), 'expected collector names');
  // Newer IPA inspects without a callback URL when collectors are named and the API URL is known.
  const derived =
    given.length === 0 && collectors.length > 0
      ? apiUrls.filter((u) => u !== 'mdns').map((u) => `${u}/v1/continue_inspection`)
      : [];
  return {
    callbackUrls: given.length > 0 ? given : derived,
    collectors: collectors.length > 0 ? collectors : ['default', 'logs'],
    timeoutS: r.num('ipa-inspection-timeout', 300, { min: 1 }),
    dhcpWaitS: r.num('ipa-inspection-dhcp-wait-timeout', 60, { min: 0 }),
    dhcpAllInterfaces: r.bool('ipa-inspection-dhcp-all-interfaces', false),
    collectLldp: r.bool('ipa-collect-lldp', false),
    lldpTimeoutS: r.num('ipa-lldp-timeout', 30, { min: 0.1 }),
  };
}

/** PXE's BOOTIF is `01-aa-bb-cc-dd-ee-ff` (hardware type, then the MAC). */
function parseBootif(value: string | undefined): string | undefined {
  if (!value) return undefined;
  const mac = value.toLowerCase().replace(/^01-/, '').replaceAll('-', ':');
  return /^([0-9a-f]{2}:){5}[0-9a-f]{2}$/.test(mac) ? mac : undefined;
}

/**
 * Reads the kernel command line (or the file `--kernel-cmdline` names), IPA's configuration files (or those
 * `--config-file` and `--config-dir` name) and the flags.
 */
export function loadConfig(argv: readonly string[]): Config {
  const flags = parseFlags(argv);
  const files = readConfFiles(
    flags.get('config-file') ?? '/etc/ironic-python-agent.conf',
    flags.get('config-dir') ?? '/etc/ironic-python-agent.d',
  );
  const cmdlineFile = flags.get('kernel-cmdline') ?? '/proc/cmdline';
  let text: string;
  try {
    text = readFileSync(cmdlineFile, 'utf8');
  } catch (err) {
    throw new ConfigError(`flag --kernel-cmdline=${cmdlineFile}: cannot read (${(err as Error).message})`);
  }
  return buildConfig(parseKernelCmdline(text), flags, files);
}
