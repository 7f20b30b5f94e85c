// The full loop's processes for one scenario, all inside run.sh's namespace: an HTTP server for Ironic's
// http_root and the images, Ironic 21.4 (one `ironic` process), and the BMC that owns the QEMU machine.
// stop() ends each by its pid and waits; run.sh ends whatever is left in the namespace.
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import {
  copyFileSync,
  mkdirSync,
  openSync,
  readFileSync,
  readdirSync,
  symlinkSync,
  truncateSync,
  writeFileSync,
} from 'node:fs';
import { join } from 'node:path';
import { IronicApi } from './ironic-api.ts';
import { until } from '../helpers/until.ts';

const repo = join(import.meta.dirname, '..', '..');
export const HOST = '10.0.2.2';
export const HTTP_PORT = 8080;
export const API_PORT = 6385;
export const BMC_PORT = 6230;
export const MAC = '52:54:00:24:00:01';
const PY = '/usr/bin/python3';

export type Firmware = 'uefi' | 'bios';

export interface Rig {
  run: string;
  api: IronicApi;
  imageUrl: string;
  imageSha256: string;
  /** BMC events: `{t, text}` with t in ms since the epoch. */
  bmcEvents(): { t: number; text: string }[];
  /** Serial logs of every boot so far, in boot order: [file name, content]. */
  serials(): [string, string][];
  ironicUpMs: number;
  stop(): Promise<void>;
}

export async function startRig(firmware: Firmware, run: string, image: string): Promise<Rig> {
  const procs: ChildProcess[] = [];
  const start = (name: string, cmd: string, args: string[]) => {
    const out = openSync(join(run, 'log', `${name}.log`), 'a');
    const p = spawn(cmd, args, { stdio: ['ignore', out, out] });
    procs.push(p);
    return p;
  };
  const stop = async () => {
    for (const p of procs.reverse()) {
      if (p.exitCode !== null || p.signalCode !== null) continue;
      const gone = new Promise((r) => p.once('exit', r));
      p.kill('SIGTERM');
      await Promise.race([gone, new Promise((r) => setTimeout(r, 15_000))]);
      if (p.exitCode === null && p.signalCode === null) p.kill('SIGKILL');
    }
  };
  try {
    for (const d of ['log', 'state', 'tmp', 'locks', 'deploy-logs', 'www/images', 'pxe', 'vm'])
      mkdirSync(join(run, d), { recursive: true });
    const out = join(repo, 'image-build', 'out');
    symlinkSync(join(out, 'vmlinuz'), join(run, 'www/images/deploy.kernel'));
    symlinkSync(join(out, 'initramfs.img'), join(run, 'www/images/deploy.initramfs'));
    symlinkSync(image, join(run, 'www/images/instance.qcow2'));
    const imageSha256 = readFileSync(`${image}.sha256`, 'utf8').split(/\s+/)[0]!;
    start('http', PY, ['-m', 'http.server', String(HTTP_PORT), '--bind', '0.0.0.0', '--directory', join(run, 'www')]);

    const t0 = Date.now();
    const conf = readFileSync(join(repo, 'scripts/fullloop/ironic.conf.in'), 'utf8')
      .replaceAll('@RUN@', run)
      .replaceAll('@HOST@', HOST)
      .replaceAll('@API_PORT@', String(API_PORT))
      .replaceAll('@HTTP_PORT@', String(HTTP_PORT))
      .replaceAll('@BOOT_MODE@', firmware);
    writeFileSync(join(run, 'ironic.conf'), conf);
    const db = spawnSync(PY, ['/usr/bin/ironic-dbsync', '--config-file', join(run, 'ironic.conf'), 'create_schema'], {
      encoding: 'utf8',
    });
    if (db.status !== 0) throw new Error(`ironic-dbsync: ${db.stderr.slice(-2000)}`);
    const ironic = start('ironic', PY, [
      '/usr/bin/ironic',
      '--config-file',
      join(run, 'ironic.conf'),
      '--log-file',
      join(run, 'log/ironic-conductor.log'),
    ]);
    const api = new IronicApi(`http://127.0.0.1:${API_PORT}`);
    await until(
      'Ironic API with the ipmi driver',
      async () => {
        if (ironic.exitCode !== null) throw new Error('ironic exited');
        const d = await api.call<{ drivers: { name: string }[] }>('GET', '/v1/drivers');
        return d.drivers.some((x) => x.name === 'ipmi');
      },
      180_000,
    ).catch((e) => {
      throw new Error(`${e}; log tail:\n${readFileSync(join(run, 'log/ironic-conductor.log'), 'utf8').slice(-3000)}`);
    });
    const ironicUpMs = Date.now() - t0;

    const vm = join(run, 'vm');
    const disk = join(vm, 'disk.raw');
    writeFileSync(disk, '');
    truncateSync(disk, 4 * 1024 ** 3);
    const qemu = [
      'qemu-system-x86_64',
      '-accel',
      'tcg',
      '-cpu',
      'max',
      '-m',
      '1536',
      '-smp',
      '1',
      '-nographic',
      '-monitor',
      'none',
      '-drive',
      `file=${disk},if=none,id=d0,format=raw,cache=unsafe`,
      '-netdev',
      `user,id=n0,bootfile=http://${HOST}:${HTTP_PORT}/boot.ipxe,hostfwd=tcp:127.0.0.1:9999-:9999`,
    ];
    if (firmware === 'uefi') {
      copyFileSync('/usr/share/OVMF/OVMF_VARS_4M.fd', join(vm, 'OVMF_VARS.fd'));
      qemu.push(
        '-drive',
        'if=pflash,format=raw,readonly=on,file=/usr/share/OVMF/OVMF_CODE_4M.fd',
        '-drive',
        `if=pflash,format=raw,file=${join(vm, 'OVMF_VARS.fd')}`,
      );
    }
    const bmcConf = join(run, 'bmc.json');
    writeFileSync(
      bmcConf,
      JSON.stringify({
        port: BMC_PORT,
        username: 'admin',
        password: 'password',
        firmware,
        qemu,
        state_dir: vm,
        disk_device: 'virtio-blk-pci,drive=d0,id=disk0,serial=FULLLOOP0',
        nic_device: `virtio-net-pci,netdev=n0,id=nic0,mac=${MAC}`,
      }),
    );
    start('bmc', PY, [join(import.meta.dirname, 'bmc.py'), bmcConf]);
    await until('the BMC', async () => readFileSync(join(run, 'log/bmc.log'), 'utf8').includes('listening'), 30_000);

    return {
      run,
      api,
      ironicUpMs,
      imageSha256,
      imageUrl: `http://${HOST}:${HTTP_PORT}/images/instance.qcow2`,
      bmcEvents: () =>
        readFileSync(join(run, 'log/bmc.log'), 'utf8')
          .split('\n')
          .flatMap((l) => {
            const m = /^(\d+\.\d+) (.*)$/.exec(l);
            return m ? [{ t: Math.round(Number(m[1]) * 1000), text: m[2]! }] : [];
          }),
      serials: () =>
        readdirSync(vm)
          .filter((f) => f.startsWith('serial-'))
          .sort((a, b) => Number(a.split('-')[1]) - Number(b.split('-')[1]))
          .map((f) => [f, readFileSync(join(vm, f), 'latin1')]),
      stop,
    };
  } catch (e) {
    await stop();
    throw e;
  }
}
