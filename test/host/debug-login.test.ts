// The debug login (sshkey/rootpwd) on a fake root, never the host's own /root or /etc: what dropbear reads, with
// the modes it insists on, and the marker that starts the ramdisk's SSH server. The QEMU e2e logs in for real
// (test/e2e/network-debug.test.ts).
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DEBUG_LOGIN_MARKER, enableDebugLogin, startDebugLogin } from '../../agent/host/debug-login.ts';
import { testTempDir } from '../helpers/temp-dir.ts';

const KEY = 'ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIKx4mB8aQmKIDYvTKWT0NIfLaaXFgOGtVeM3e6ptnqV5 op@desk';
const HASH = '$6$e2e$JrOSyJc7Y9oT8mN1DJgU8.3kZKiwqKFKn4gpBk0e7TSp8CjQFmPfC5ZQXvTfA4wAlW/bEeaHT2tEvUN3Q1bDA/';
const DAY = 86_400_000;

describe('debug login', () => {
  const fakeRoot = () => testTempDir('ina-debug-login-');
  const mode = async (p: string) => (await stat(p)).mode & 0o777;

  it('nothing asked, nothing written: no marker, so no SSH server', async () => {
    const root = await fakeRoot();
    expect(await enableDebugLogin(root, {})).toBeNull();
    await expect(stat(join(root, DEBUG_LOGIN_MARKER))).rejects.toThrow(/ENOENT/);
    await expect(stat(join(root, 'root'))).rejects.toThrow(/ENOENT/);
  });

  it('sshkey: the only line of root authorized_keys (0600 in a 0700 folder), key-only logins', async () => {
    const root = await fakeRoot();
    // An older key (an earlier start, or baked in) does not stay valid beside it; a loose folder is tightened.
    await mkdir(join(root, 'root', '.ssh'), { recursive: true, mode: 0o777 });
    await writeFile(join(root, 'root', '.ssh', 'authorized_keys'), 'ssh-rsa AAAAold old@key\n', { mode: 0o644 });
    expect(await enableDebugLogin(root, { sshKey: KEY })).toBe('key');
    const keys = join(root, 'root', '.ssh', 'authorized_keys');
    expect(await readFile(keys, 'utf8')).toBe(`${KEY}\n`);
    expect(await mode(keys)).toBe(0o600);
    expect(await mode(join(root, 'root', '.ssh'))).toBe(0o700);
    expect(await readFile(join(root, DEBUG_LOGIN_MARKER), 'utf8')).toBe('key\n');
    await expect(stat(join(root, 'etc', 'shadow'))).rejects.toThrow(/ENOENT/);
  });

  it("rootpwd: root's hash in /etc/shadow beside the other users, password logins allowed", async () => {
    const root = await fakeRoot();
    await mkdir(join(root, 'etc'));
    await writeFile(join(root, 'etc', 'shadow'), 'root:*:1:0:99999:7:::\nrescue:$6$x$y:1:0:99999:7:::\n');
    expect(await enableDebugLogin(root, { sshKey: KEY, rootPasswordHash: HASH }, 20_000 * DAY + 5)).toBe('password');
    expect(await readFile(join(root, 'etc', 'shadow'), 'utf8')).toBe(
      `root:${HASH}:20000:0:99999:7:::\nrescue:$6$x$y:1:0:99999:7:::\n`,
    );
    expect(await mode(join(root, 'etc', 'shadow'))).toBe(0o640);
    expect(await readFile(join(root, DEBUG_LOGIN_MARKER), 'utf8')).toBe('password\n');
    expect(await readFile(join(root, 'root', '.ssh', 'authorized_keys'), 'utf8')).toBe(`${KEY}\n`);
  });

  it("at start: outside a ramdisk without --ina-rescue-root the host's users are left alone, with a warning", async () => {
    const lines: string[] = [];
    const log = {
      info: (_: unknown, m?: string) => lines.push(`info ${m}`),
      warn: (m: unknown) => lines.push(`warn ${m}`),
      error: (_: unknown, m?: string) => lines.push(`error ${m}`),
    };
    await startDebugLogin({ debugLogin: { sshKey: KEY } }, log as never);
    expect(lines).toEqual([
      "warn sshkey/rootpwd: the debug login needs a ramdisk or --ina-rescue-root (the host's own users are never changed)",
    ]);
    const root = await fakeRoot();
    await startDebugLogin({ debugLogin: { sshKey: KEY }, rescueRoot: root }, log as never);
    expect(lines[1]).toBe('info debug login: root by SSH key (sshkey) on port 22');
    // A root it cannot write to is logged, and the agent starts anyway.
    const other = await fakeRoot();
    await writeFile(join(other, 'etc'), 'a file where a folder should be');
    await startDebugLogin({ debugLogin: { rootPasswordHash: HASH }, rescueRoot: other }, log as never);
    expect(lines[2]).toMatch(/^error debug login not set up: .*(EEXIST|ENOTDIR)/);
    // A malformed value was left out by the config reader: said at start, and the rest of the login still set up.
    await startDebugLogin(
      { debugLogin: { sshKey: KEY, refused: ['rootpwd: expected a crypt(3) hash'] }, rescueRoot: root },
      log as never,
    );
    expect(lines.slice(3)).toEqual([
      'error debug login: rootpwd: expected a crypt(3) hash; left out, the agent runs on',
      'info debug login: root by SSH key (sshkey) on port 22',
    ]);
  });
});
