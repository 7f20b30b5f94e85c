// Rescue mode: the conductor's crypt(3) hash becomes the password of the `rescue` user, so the operator can log
// in to the ramdisk with what they gave Ironic. IPA writes the hash to a file for a DIB unit that runs useradd
// and gives the user passwordless sudo; this ramdisk has neither, so the agent sets the user itself (passwd,
// shadow) under `root` (`/` in a ramdisk; a test's fake root elsewhere: never the host's own /etc), as a second
// name for uid 0: rescuing an instance means mounting, checking and repairing its disks, which needs root.
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export const RESCUE_USER = 'rescue';
/** SHA-256 or SHA-512 crypt (`$5$`/`$6$`, optional rounds), what Ironic's hash_password produces. */
export const CRYPT_HASH = /^\$[56]\$(rounds=\d{4,9}\$)?[./A-Za-z0-9]{1,16}\$[./A-Za-z0-9]{43,86}$/;

async function readLines(file: string): Promise<string[]> {
  const text = await readFile(file, 'utf8').catch((e: NodeJS.ErrnoException) =>
    e.code === 'ENOENT' ? '' : Promise.reject(e),
  );
  return text.split('\n').filter((l) => l !== '');
}

/** Replaces the file in one step, so a crash never leaves a half-written passwd or shadow. */
async function replaceFile(file: string, lines: string[], mode: number): Promise<void> {
  const tmp = `${file}.ina-new`;
  await writeFile(tmp, `${lines.join('\n')}\n`, { mode });
  await rename(tmp, file);
}

function upsert(lines: string[], name: string, line: string): string[] {
  const i = lines.findIndex((l) => l.split(':')[0] === name);
  return i < 0 ? [...lines, line] : lines.map((l, j) => (j === i ? line : l));
}

/** Writes the hash file and the marker as IPA does, and gives the rescue user that password. */
export async function setRescuePassword(root: string, hash: string, now = Date.now()): Promise<void> {
  const etc = join(root, 'etc');
  await mkdir(join(etc, 'ipa-rescue-config'), { recursive: true, mode: 0o700 });
  await writeFile(join(etc, 'ipa-rescue-config', 'ipa-rescue-password'), hash, { mode: 0o600 });

  const passwd = await readLines(join(etc, 'passwd'));
  if (!passwd.some((l) => l.split(':')[0] === RESCUE_USER)) {
    await replaceFile(
      join(etc, 'passwd'),
      [...passwd, `${RESCUE_USER}:x:0:0:rescue:/home/${RESCUE_USER}:/bin/sh`],
      0o644,
    );
    await mkdir(join(root, 'home', RESCUE_USER), { recursive: true, mode: 0o700 });
  }
  await setShadowHash(root, RESCUE_USER, hash, now);
  await writeFile(join(etc, '.rescued'), '');
}

/** Gives `user` the password of this crypt(3) hash in `root`'s /etc/shadow (the debug login's root too). */
export async function setShadowHash(root: string, user: string, hash: string, now = Date.now()): Promise<void> {
  const file = join(root, 'etc', 'shadow');
  const days = Math.floor(now / 86_400_000);
  await mkdir(join(root, 'etc'), { recursive: true });
  await replaceFile(file, upsert(await readLines(file), user, `${user}:${hash}:${days}:0:99999:7:::`), 0o640);
}
