// The RAM claim of docs/qcow2-streaming.md, shown: an 8 GiB-virtual qcow2 (its file larger than the
// limit) deployed by an agent inside a memory cgroup capped at 512 MiB. Streamed, it succeeds; the same
// agent sent down the buffered path (ina-qcow2-stream-spool=0, buffer in tmpfs, which the cgroup is
// charged for, as the ramdisk's RAM is) does not. Run as root: `scripts/node.sh --import tsx scripts/qcow2-cgroup.ts`.
// Uses a cgroup v1 memory controller directory of its own (or cgroup v2's memory.max), removed afterwards.
import { randomBytes } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, open, readFile, rm, rmdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { execa } from 'execa';
import { attachLoop, detachLoop, GiB, MiB } from '../test/helpers/loop.ts';
import { startImageServer } from '../test/helpers/image-server.ts';
import { workDir } from '../test/helpers/make-image.ts';
import { standaloneArgs } from './lib/standalone-args.ts';

const root = new URL('..', import.meta.url).pathname;
const LIMIT = 512 * MiB;
const VIRTUAL = 8 * GiB;

interface Cgroup {
  dir: string;
  procs: string;
  peak(): Promise<number>;
}

async function makeCgroup(name: string): Promise<Cgroup> {
  const v1 = '/sys/fs/cgroup/memory';
  if (existsSync(v1)) {
    const dir = join(v1, name);
    await mkdir(dir);
    await writeFile(join(dir, 'memory.limit_in_bytes'), String(LIMIT));
    return {
      dir,
      procs: join(dir, 'cgroup.procs'),
      peak: async () => Number(await readFile(join(dir, 'memory.max_usage_in_bytes'), 'utf8')),
    };
  }
  const dir = join('/sys/fs/cgroup', name);
  await mkdir(dir);
  await writeFile(join(dir, 'memory.max'), String(LIMIT));
  await writeFile(join(dir, 'memory.swap.max'), '0').catch(() => undefined);
  return {
    dir,
    procs: join(dir, 'cgroup.procs'),
    peak: async () => Number(await readFile(join(dir, 'memory.peak'), 'utf8').catch(() => 'NaN')),
  };
}

/** 8 GiB virtual, 48 MiB of random data every 512 MiB (768 MiB of data), a GPT so the partition check passes. */
async function buildImage(dir: string): Promise<string> {
  const raw = join(dir, 'big.raw');
  await execa('truncate', ['-s', String(VIRTUAL), raw]);
  const fh = await open(raw, 'r+');
  try {
    for (let at = 2 * MiB; at < VIRTUAL; at += 512 * MiB) await fh.write(randomBytes(48 * MiB), 0, 48 * MiB, at);
  } finally {
    await fh.close();
  }
  await execa('sgdisk', ['-n', '1:2048:0', '-t', '1:8300', raw]);
  const qcow2 = join(dir, 'big.qcow2');
  await execa('qemu-img', ['convert', '-f', 'raw', '-O', 'qcow2', raw, qcow2]);
  await rm(raw);
  return qcow2;
}

async function deployInCgroup(name: string, device: string, bufferDir: string, url: string, flags: string[]) {
  const cg = await makeCgroup(name);
  const args = ['--import', 'tsx', 'agent/main.ts', ...standaloneArgs(device, bufferDir), ...flags];
  // The shell joins the cgroup, then becomes the agent: everything it starts is charged there too.
  const child = execa('sh', ['-c', `echo $$ > ${cg.procs} && exec "$@"`, 'sh', process.execPath, ...args], {
    cwd: root,
    reject: false,
    buffer: false,
  });
  try {
    const api = await new Promise<string>((resolve, reject) => {
      createInterface({ input: child.stdout! }).on('line', (line) => {
        if (line.includes('"agent API listening"')) resolve(`http://127.0.0.1:${JSON.parse(line).port}`);
      });
      void child.then(() => reject(new Error('agent exited before listening')));
    });
    const started = Date.now();
    const post = await fetch(`${api}/v1/commands/?wait=false`, {
      method: 'POST',
      body: JSON.stringify({
        name: 'standby.prepare_image',
        params: {
          image_info: {
            id: 'big',
            urls: [url],
            disk_format: 'qcow2',
            os_hash_algo: 'sha256',
            os_hash_value: process.env.DIGEST,
          },
        },
      }),
    });
    let cmd = (await post.json()) as { command_status: string; command_error: unknown };
    while (cmd.command_status === 'RUNNING') {
      await new Promise((r) => setTimeout(r, 500));
      const r = await fetch(`${api}/v1/commands/`).catch(() => null);
      if (!r)
        return {
          outcome: 'the agent died (killed by the cgroup OOM killer)',
          seconds: (Date.now() - started) / 1000,
          peak: await cg.peak(),
        };
      cmd = ((await r.json()) as { commands: (typeof cmd)[] }).commands.at(-1)!;
    }
    const error = cmd.command_error ? `: ${JSON.stringify(cmd.command_error).slice(0, 300)}` : '';
    return { outcome: `${cmd.command_status}${error}`, seconds: (Date.now() - started) / 1000, peak: await cg.peak() };
  } finally {
    child.kill('SIGKILL');
    await child;
    for (let i = 0; i < 50; i++) {
      if (
        await rmdir(cg.dir).then(
          () => true,
          () => false,
        )
      )
        break;
      await new Promise((r) => setTimeout(r, 100));
    }
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('run as root: it creates a cgroup and a loop device');
  const work = await workDir('ina-qcow2-cg-');
  const server = await startImageServer();
  const loop = await attachLoop(VIRTUAL + 64 * MiB);
  const bufferDir = await mkdtemp('/dev/shm/ina-qcow2-cg-');
  try {
    await execa('losetup', ['--direct-io=on', loop.path]);
    console.log('building an 8 GiB-virtual qcow2 with 768 MiB of data...');
    const qcow2 = await buildImage(work.dir);
    process.env.DIGEST = (await execa('sha256sum', [qcow2])).stdout.split(' ')[0];
    const url = await server.serveFile('big.qcow2', qcow2);
    const size = (await execa('stat', ['-c', '%s', qcow2])).stdout;
    console.log(`qcow2 file: ${(Number(size) / MiB).toFixed(0)} MiB; cgroup memory limit ${LIMIT / MiB} MiB`);

    const streamed = await deployInCgroup('ina-qcow2-streamed', loop.path, bufferDir, url, []);
    console.log(
      `streamed: ${streamed.outcome} in ${streamed.seconds.toFixed(1)} s, cgroup peak ${(streamed.peak / MiB).toFixed(1)} MiB`,
    );
    if (streamed.outcome === 'SUCCEEDED') {
      // The GPT's headers differ by design (the backup is moved to the disk's real end), so the bytes
      // between the first and last MiB are compared with qemu-img's own conversion.
      const reference = join(work.dir, 'big.ref.raw');
      await execa('qemu-img', ['convert', '-f', 'qcow2', '-O', 'raw', qcow2, reference]);
      const same = await execa(
        'cmp',
        [`--ignore-initial=${MiB}`, `--bytes=${VIRTUAL - 2 * MiB}`, reference, loop.path],
        { reject: false },
      );
      console.log(
        `  device vs qemu-img convert -O raw, bytes 1 MiB..8 GiB-1 MiB: ${same.exitCode === 0 ? 'identical' : `DIFFERENT ${same.stdout} ${same.stderr}`}`,
      );
      await rm(reference);
    }
    const buffered = await deployInCgroup('ina-qcow2-buffered', loop.path, bufferDir, url, [
      '--ina-qcow2-stream-spool=0',
    ]);
    console.log(
      `buffered: ${buffered.outcome} after ${buffered.seconds.toFixed(1)} s, cgroup peak ${(buffered.peak / MiB).toFixed(1)} MiB`,
    );
    const ok = streamed.outcome === 'SUCCEEDED' && buffered.outcome !== 'SUCCEEDED';
    console.log(ok ? 'RESULT: streamed fits in 512 MiB, buffered does not' : 'RESULT: NOT SHOWN');
    process.exitCode = ok ? 0 : 1;
  } finally {
    await server.close();
    await detachLoop(loop);
    await rm(bufferDir, { recursive: true, force: true });
    await work.cleanup();
  }
}

main().catch((err) => {
  console.error(`qcow2-cgroup failed: ${err instanceof Error ? err.stack : String(err)}`);
  process.exit(1);
});
