// A fake nvme-cli: `id-ctrl` prints `id-ctrl.json` from the state folder; `format` does what
// `behaviour.json` says: `zero` the device node it was given (a test's loop device), leave it as it is
// (`noop`, a format that erased nothing), or `fail`. With `mountOnIdentify` (a mount table file), `id-ctrl` adds
// a mount of the device to it, as if something mounted the disk while the drive was being identified.
export const FAKE_NVME = String.raw`
const b = fs.existsSync(state + '/behaviour.json') ? JSON.parse(fs.readFileSync(state + '/behaviour.json', 'utf8')) : {};
if (args[0] === 'id-ctrl') {
  if (b.idFails) { process.stderr.write('NVMe status: Invalid Field in Command\n'); process.exit(1); }
  if (b.mountOnIdentify) {
    const rdev = fs.statSync(args[1]).rdev;
    const majMin = ((rdev >> 8) & 0xfff) + ':' + ((rdev & 0xff) | ((rdev >> 12) & 0xfff00));
    fs.appendFileSync(b.mountOnIdentify, '999 1 ' + majMin + ' / /mnt/ina-guard-test rw - ext4 ' + args[1] + ' rw\n');
  }
  process.stdout.write(fs.readFileSync(state + '/id-ctrl.json', 'utf8'));
  process.exit(0);
}
if (args[0] === 'format') {
  if (b.format === 'fail') { process.stderr.write('NVMe status: INVALID_FORMAT: The LBA Format specified is not supported(0x410a)\n'); process.exit(1); }
  if (b.format === 'zero') {
    const dev = args[1];
    const size = Number(require('node:child_process').execFileSync('blockdev', ['--getsize64', dev]));
    const fd = fs.openSync(dev, 'r+');
    const z = Buffer.alloc(1 << 20);
    for (let at = 0; at < size; at += z.length) fs.writeSync(fd, z, 0, Math.min(z.length, size - at), at);
    fs.fsyncSync(fd); fs.closeSync(fd);
  }
  process.stdout.write('Success formatting namespace:1\n');
  process.exit(0);
}
process.stderr.write('fake nvme: unexpected ' + JSON.stringify(args) + '\n');
process.exit(1);
`;
