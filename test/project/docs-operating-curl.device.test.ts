// docs/operating.md's "Commands with curl" section, run as an operator runs it: its shell blocks, in order, in
// one root bash, from the repository's top folder. The doc attaches its own sparse loop device, serves its image
// on 127.0.0.1:8080 and starts `npm run agent -- --standalone` allow-listed to that device, so this test checks
// the text, verbatim, against the real agent. Only a cleanup for a run that stops half-way is added (the doc's
// last block does it otherwise).
import { readdirSync, readFileSync } from 'node:fs';
import { rm, writeFile } from 'node:fs/promises';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { execa } from 'execa';
import { describe, expect, it } from 'vitest';
import { testTempDir } from '../helpers/temp-dir.ts';

const root = join(import.meta.dirname, '..', '..');
const SECTION = '## Commands with curl';

/** The ```sh blocks of the section, in order. */
function curlSectionBlocks(markdown: string): string[] {
  const start = markdown.indexOf(SECTION);
  if (start < 0) throw new Error(`docs/operating.md has no "${SECTION}" section`);
  const next = markdown.indexOf('\n## ', start + SECTION.length);
  const section = markdown.slice(start, next < 0 ? undefined : next);
  return [...section.matchAll(/^```sh\n([\s\S]*?)^```$/gm)].map((m) => m[1]!);
}

// Whatever the doc attached or started, should a block fail before its own cleanup.
const ON_FAILURE = `trap 'rc=$?; if [ $rc -ne 0 ]; then
  [ -n "\${AGENT:-}" ] && kill -TERM -- -"$AGENT" 2>/dev/null
  for p in "\${HTTP:-}" "\${CALLBACK:-}"; do [ -n "$p" ] && kill "$p" 2>/dev/null; done
  wait
  [ -n "\${LOOP:-}" ] && losetup -d "$LOOP"
  [ -n "\${WORK:-}" ] && rm -rf "$WORK"
fi; exit $rc' EXIT
`;

/** The doc's work folders (`mktemp -d /tmp/ina-try.XXXXXX`) there are now. */
function tryDirs(): string[] {
  return readdirSync('/tmp')
    .filter((n) => n.startsWith('ina-try.'))
    .map((n) => join('/tmp', n));
}

/**
 * What a run that was killed (its timeout's SIGKILL comes before the shell's own trap can run) left of the doc's
 * work in `dir`: the agent allow-listed to its loop device and the image server on its folder stopped, the loop
 * device detached, the folder removed.
 */
async function sweep(dir: string): Promise<void> {
  const loops = (await execa('losetup', ['-l', '-n', '-O', 'NAME,BACK-FILE'])).stdout
    .split('\n')
    .map((l) => l.trim().split(/\s+/))
    .filter(([, file]) => file?.startsWith(`${dir}/`))
    .map(([name]) => name!);
  for (const pattern of [dir, ...loops.map((l) => `--device-allowlist=${l}`)]) {
    await execa('pkill', ['-f', '--', pattern], { reject: false });
  }
  for (const l of loops) await execa('losetup', ['-d', l], { reject: false });
  await rm(dir, { recursive: true, force: true });
}

function portFree(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const probe = createServer()
      .once('error', () => resolve(false))
      .listen(port, '127.0.0.1', () => probe.close(() => resolve(true)));
  });
}

describe('docs/operating.md, commands with curl', () => {
  const blocks = curlSectionBlocks(readFileSync(join(root, 'docs/operating.md'), 'utf8'));

  it('has the blocks an operator needs: setup, agent, deploys, polling, steps, cleaning, inspection, cleanup', () => {
    const text = blocks.join('\n');
    for (const needle of [
      'losetup -f -P --show',
      'npm run agent -- --standalone --device-allowlist=',
      '"name": "standby.prepare_image"',
      '"disk_format": "raw"',
      '"disk_format": "qcow2"',
      '"configdrive": ',
      '/v1/commands/?wait=true',
      'curl -fsS http://127.0.0.1:9999/v1/commands/',
      '"name": "clean.get_clean_steps"',
      '"name": "clean.execute_clean_step"',
      '"step": "erase_devices"',
      '--ipa-inspection-callback-url=',
      'losetup -d "$LOOP"',
    ]) {
      expect(text).toContain(needle);
    }
  });

  it('runs verbatim against a standalone agent on a loop device', { timeout: 360_000 }, async () => {
    for (const port of [9999, 8080, 8081]) {
      expect(await portFree(port), `port ${port} on 127.0.0.1 is in use; the doc's commands need it`).toBe(true);
    }
    const dir = await testTempDir('ina-docs-curl-');
    const script = join(dir, 'operating.sh');
    await writeFile(script, `set -euo pipefail\n${ON_FAILURE}${blocks.join('\n')}`);
    const before = new Set(tryDirs());
    const run = await execa('bash', [script], {
      cwd: root,
      reject: false,
      all: true,
      timeout: 280_000,
      // time for the shell's trap to clean up after the command it waits for has ended
      forceKillAfterDelay: 30_000,
    });
    if (run.exitCode !== 0) for (const d of tryDirs().filter((x) => !before.has(x))) await sweep(d);
    const out = run.all ?? '';
    expect(run.exitCode, out).toBe(0);
    // Each command the doc waits for, and the last record of the polled deploy, succeeded; none failed.
    expect(out.match(/"command_status": "SUCCEEDED"/g)?.length, out).toBe(4);
    expect(out).not.toContain('"FAILED"');
    // The raw deploy: the image's partition and the config drive's, as `sgdisk -p` prints them.
    expect(out).toMatch(/^ {3}1 +2048 +131038 +63\.0 MiB +8300 +root$/m);
    expect(out).toMatch(/^ {3}2 +\d+ +\d+ +64\.0 MiB /m);
    expect(out).toContain('"root uuid": "0x00000000"');
    // Polling saw the qcow2 deploy running, then its end.
    expect(out).toMatch(/"command_status": "RUNNING"/);
    expect(out).toMatch(/\{"phase":"[a-z]+","bytes_done":\d+/);
    // The clean steps, and the erase read back.
    expect(out).toContain('{"step":"erase_devices_metadata","priority":99,"interface":"deploy"}');
    expect(out).toMatch(/"ok": true/);
    // The inventory the callback received names the loop device.
    expect(out).toMatch(/"disks": \[[^\]]*"\/dev\/loop\d+"/);
    // The last block detached the device and removed the work folder.
    const loops = (await execa('losetup', ['-l', '-n', '-O', 'BACK-FILE'])).stdout;
    expect(loops).not.toMatch(/ina-try\./);
  });
});
