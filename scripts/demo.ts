// `npm run demo`: deploys a real whole-disk image with the agent, on this machine, touching nothing but
// a sparse loop device it attaches itself. Builds a small GPT image (ext4 root with a marker file),
// serves it on loopback, starts the agent standalone limited to the loop device, runs
// `standby.prepare_image` with a config drive while showing progress, then shows the partition table,
// checks the bytes and reads the marker and the config drive back. Always cleans up.
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { execa, type ResultPromise } from 'execa';
import { attachLoop, detachLoop, GiB, MiB, type LoopDevice } from '../test/helpers/loop.ts';
import { startImageServer, type ImageServer } from '../test/helpers/image-server.ts';
import { makeDiskImage, workDir } from '../test/helpers/make-image.ts';
import { buildIso, toWire } from '../test/helpers/configdrive.ts';

const root = new URL('..', import.meta.url).pathname;
const say = (text: string) => console.log(`\n\x1b[1m== ${text}\x1b[0m`);
const indent = (text: string) => text.replace(/^/gm, '   ');

/** Starts `agent/main.ts` standalone on an ephemeral loopback port; resolves with its URL. */
async function startAgent(device: string): Promise<{ url: string; child: ResultPromise }> {
  // One process (no npx/tsx wrapper in between), so that SIGTERM reaches the agent itself.
  const child = execa(
    process.execPath,
    [
      '--import',
      'tsx',
      join(root, 'agent/main.ts'),
      '--standalone',
      '--kernel-cmdline=/dev/null',
      '--ipa-listen-host=127.0.0.1',
      '--ipa-listen-port=0',
      `--device-allowlist=${device}`,
    ],
    { cwd: root, reject: false, buffer: false },
  );
  child.stderr?.pipe(process.stderr);
  const lines = createInterface({ input: child.stdout! });
  return new Promise((resolve, reject) => {
    lines.on('line', (line) => {
      let entry: { msg?: string; port?: number } = {};
      try {
        entry = JSON.parse(line);
      } catch {
        return;
      }
      if (entry.msg?.startsWith('image ')) console.log(`   agent │ ${entry.msg}`);
      if (entry.msg === 'agent API listening') resolve({ url: `http://127.0.0.1:${entry.port}`, child });
    });
    void child.then(() => reject(new Error('the agent exited before listening')));
  });
}

async function post(url: string, name: string, params: unknown): Promise<any> {
  const res = await fetch(`${url}/v1/commands/?wait=false`, { method: 'POST', body: JSON.stringify({ name, params }) });
  const body = await res.json();
  if (res.status !== 200) throw new Error(`${name}: HTTP ${res.status} ${JSON.stringify(body)}`);
  return body;
}

async function waitWithProgress(url: string): Promise<any> {
  let last = '';
  for (;;) {
    const { commands } = (await (await fetch(`${url}/v1/commands/`)).json()) as { commands: any[] };
    const cmd = commands.at(-1);
    if (cmd.command_status !== 'RUNNING') return cmd;
    const p = cmd.command_result;
    const line = p
      ? `${p.phase}: ${(p.bytes_done / MiB).toFixed(1)} of ${p.bytes_total ? (p.bytes_total / MiB).toFixed(1) : '?'} MiB, ${(p.rate_bps / MiB).toFixed(1)} MiB/s, eta ${p.eta_s ?? '?'} s`
      : 'starting';
    if (line !== last) console.log(`   progress │ ${line}`);
    last = line;
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function main(): Promise<void> {
  if (process.getuid?.() !== 0) throw new Error('the demo attaches a loop device and writes it: run it as root');
  const work = await workDir('ina-demo-');
  let loop: LoopDevice | undefined;
  let server: ImageServer | undefined;
  let agent: ResultPromise | undefined;
  try {
    say('Building a 64 MiB whole-disk image: GPT, one ext4 partition with a marker file');
    const image = await makeDiskImage(work.dir, { sizeMiB: 64, table: 'gpt', name: 'demo-disk.raw' });
    const data = await readFile(image.path);
    const digest = createHash('sha256').update(data).digest('hex');
    console.log(indent(`${image.path}  sha256 ${digest}\nmarker: ${image.marker}`));

    say('Attaching a sparse 5 GiB file as a loop device (the agent picks the smallest disk of at least 4 GiB)');
    loop = await attachLoop(5 * GiB);
    console.log(indent(`${loop.path} backed by ${loop.file}`));

    say('Serving the image on loopback and building a config drive (ISO labelled config-2)');
    server = await startImageServer();
    const url = await server.serveFile('demo-disk.raw', image.path);
    const nodeMeta = { uuid: 'ina-demo-node', name: 'demo', hostname: 'demo.example', public_keys: {} };
    const configdrive = toWire(await buildIso({ 'openstack/latest/meta_data.json': JSON.stringify(nodeMeta) }));
    console.log(indent(`${url}\nconfig drive: ${configdrive.length} base64 characters`));

    say(`Starting the agent standalone, allowed to write ${loop.path} only`);
    const started = await startAgent(loop.path);
    agent = started.child;
    console.log(indent(`agent API at ${started.url}`));

    say('standby.prepare_image');
    await post(started.url, 'standby.prepare_image', {
      image_info: {
        id: 'demo-disk.raw',
        urls: [url],
        disk_format: 'raw',
        stream_raw_images: true,
        os_hash_algo: 'sha256',
        os_hash_value: digest,
      },
      configdrive,
    });
    const result = await waitWithProgress(started.url);
    console.log(
      indent(
        JSON.stringify(
          { status: result.command_status, result: result.command_result, error: result.command_error },
          null,
          2,
        ),
      ),
    );
    if (result.command_status !== 'SUCCEEDED') throw new Error('prepare_image failed');
    const uuids = (await (
      await fetch(`${started.url}/v1/commands/?wait=true`, {
        method: 'POST',
        body: JSON.stringify({ name: 'standby.get_partition_uuids', params: {} }),
      })
    ).json()) as { command_result: unknown };
    console.log(indent(`get_partition_uuids: ${JSON.stringify(uuids.command_result)}`));

    say('The partition table on the loop device');
    console.log(indent((await execa('sgdisk', ['-p', loop.path])).stdout));
    console.log(indent((await execa('sgdisk', ['-v', loop.path])).stdout.trim()));

    say('Checking the bytes and the files');
    const fh = await import('node:fs/promises').then((fs) => fs.open(loop!.path, 'r'));
    const { start, end } = image.partition;
    const onDisk = Buffer.alloc(end - start);
    await fh.read(onDisk, 0, onDisk.length, start);
    await fh.close();
    const same = onDisk.equals(data.subarray(start, end));
    console.log(
      indent(`root partition bytes (${(end - start) / MiB} MiB) identical to the image: ${same ? 'yes' : 'NO'}`),
    );
    const marker = (
      await execa('debugfs', ['-R', 'cat /ina-marker.txt', `${loop.path}p1`], { stderr: 'ignore' })
    ).stdout.trim();
    console.log(
      indent(`marker read back with debugfs: ${marker} (${marker === image.marker ? 'matches' : 'DIFFERS'})`),
    );
    const label = (
      await execa('blkid', ['-p', '-o', 'value', '-s', 'LABEL', `${loop.path}p2`], { reject: false })
    ).stdout.trim();
    const meta = (
      await execa('isoinfo', ['-R', '-i', `${loop.path}p2`, '-x', '/openstack/latest/meta_data.json'], {
        reject: false,
      })
    ).stdout;
    console.log(
      indent(`config drive partition ${loop.path}p2: label ${label || '?'}, meta_data.json ${meta || '(unreadable)'}`),
    );
    if (!same || marker !== image.marker) throw new Error('the disk does not hold the image');
    say('Done: the image is on the disk, verified.');
  } finally {
    if (agent) {
      agent.kill('SIGTERM');
      const stopped = await Promise.race([
        agent.then(
          () => true,
          () => true,
        ),
        new Promise((r) => setTimeout(() => r(false), 5000)),
      ]);
      if (!stopped) agent.kill('SIGKILL');
    }
    await server?.close();
    if (loop) await detachLoop(loop);
    await work.cleanup();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    console.error(`demo failed: ${err instanceof Error ? err.message : String(err)}`);
    process.exit(1);
  },
);
