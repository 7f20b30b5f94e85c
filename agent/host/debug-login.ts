// The debug login of IPA's published images (DIB's dynamic-login element), for an operator whose node will not
// deploy: `sshkey` becomes root's only authorized key, `rootpwd` root's password. The agent writes them at start
// under `root` (`/` in a ramdisk; a test's fake root elsewhere: never the host's own users) and leaves a marker
// for the ramdisk's SSH server script (image-build/rootfs/usr/lib/ina/run-sshd), which rescue uses as well: it
// starts dropbear once the marker is there, with password logins only when a root password was given.
import { chmod, mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { Config } from '../config/config.ts';
import { errorText } from '../errors.ts';
import type { Logger } from '../log.ts';
import { setShadowHash } from './rescue-user.ts';

/** Under `root`; its content says which logins dropbear takes: `key` (public keys only) or `password` (both). */
export const DEBUG_LOGIN_MARKER = join('run', 'ina', 'debug-login');

/** Sets up what was asked for and returns the login mode, or null when nothing was asked (no server then). */
export async function enableDebugLogin(
  root: string,
  login: Config['debugLogin'],
  now = Date.now(),
): Promise<'key' | 'password' | null> {
  if (login.sshKey === undefined && login.rootPasswordHash === undefined) return null;
  if (login.sshKey !== undefined) {
    const dir = join(root, 'root', '.ssh');
    await mkdir(dir, { recursive: true, mode: 0o700 });
    // dropbear refuses keys in a folder others may write to; mkdir keeps the mode of one that already exists.
    await chmod(dir, 0o700);
    // The only line, as DIB writes it: a key from an earlier start or image never stays valid beside it.
    const file = join(dir, 'authorized_keys');
    await writeFile(`${file}.ina-new`, `${login.sshKey}\n`, { mode: 0o600 });
    await rename(`${file}.ina-new`, file);
  }
  if (login.rootPasswordHash !== undefined) await setShadowHash(root, 'root', login.rootPasswordHash, now);
  const mode = login.rootPasswordHash !== undefined ? 'password' : 'key';
  await mkdir(join(root, 'run', 'ina'), { recursive: true });
  await writeFile(join(root, DEBUG_LOGIN_MARKER), `${mode}\n`);
  return mode;
}

/** At start: acts on sshkey/rootpwd, logging what an operator can now do; a failure is logged, never fatal. */
export async function startDebugLogin(
  config: Pick<Config, 'debugLogin' | 'rescueRoot'>,
  log: Pick<Logger, 'info' | 'warn' | 'error'>,
): Promise<void> {
  const { debugLogin } = config;
  for (const why of debugLogin.refused ?? []) log.error({}, `debug login: ${why}; left out, the agent runs on`);
  if (debugLogin.sshKey === undefined && debugLogin.rootPasswordHash === undefined) return;
  if (!config.rescueRoot) {
    log.warn(
      "sshkey/rootpwd: the debug login needs a ramdisk or --ina-rescue-root (the host's own users are never changed)",
    );
    return;
  }
  try {
    const mode = await enableDebugLogin(config.rescueRoot, debugLogin);
    log.info(
      { root: config.rescueRoot, mode },
      mode === 'key'
        ? 'debug login: root by SSH key (sshkey) on port 22'
        : `debug login: root by password (rootpwd)${debugLogin.sshKey ? ' or SSH key (sshkey)' : ''} on port 22`,
    );
  } catch (err) {
    log.error({ err: errorText(err) }, `debug login not set up: ${errorText(err)}`);
  }
}
