// A fake nvme-cli: `id-ctrl` prints `id-ctrl.json` from the state folder; `format` does what
// `behaviour.json` says: `zero` the device node it was given (a test's loop device), leave it as it is
// (`noop`, a format that erased nothing), or `fail`.
export const FAKE_NVME = String.raw`
const b = fs.existsSync(state + '/behaviour.json') ? JSON.parse(fs.readFileSync(state + '/behaviour.json', 'utf8')) : {};
if (args[0] === 'id-ctrl') {
  if (b.idFails) { process.stderr.write('NVMe status: Invalid Field in Command\n'); process.exit(1); }
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
