// A fake hdparm over a recorded `hdparm -I` page (test/fixtures/hdparm/): it prints the page, and the
// security commands change its Security section the way a drive's state machine would. `behaviour.json`
// in the state folder makes a command fail, hang or crash, to prove the password never stays behind.
export const FAKE_HDPARM = String.raw`
const page = state + '/identify.txt';
const b = fs.existsSync(state + '/behaviour.json') ? JSON.parse(fs.readFileSync(state + '/behaviour.json', 'utf8')) : {};
let text = fs.readFileSync(page, 'utf8');
const setLine = (word, on) => {
  text = text.replace(new RegExp('^\\t(not)?\\t' + word + '$', 'm'), on ? '\t\t' + word : '\tnot\t' + word);
};
const has = (word) => new RegExp('^\\t\\t' + word + '$', 'm').test(text);
const zero = (dev) => {
  const fd = fs.openSync(dev, 'r+');
  const size = Number(require('node:child_process').execFileSync('blockdev', ['--getsize64', dev]));
  const z = Buffer.alloc(1 << 20);
  for (let at = 0; at < size; at += z.length) fs.writeSync(fd, z, 0, Math.min(z.length, size - at), at);
  fs.fsyncSync(fd); fs.closeSync(fd);
};
const fail = (msg) => { process.stderr.write(msg + '\n'); process.exit(5); };
if (args[0] === '-I') {
  if (b.identifyFails) fail('HDIO_DRIVE_CMD(identify) failed: Input/output error');
  process.stdout.write(text);
  process.exit(0);
}
const [, , op, pw] = args;
const save = () => fs.writeFileSync(page, text);
switch (op) {
  case '--security-set-pass':
    if (b.setPassFails) fail('SECURITY_SET_PASS: Input/output error');
    setLine('enabled', true); save(); break;
  case '--security-erase':
  case '--security-erase-enhanced':
    if (b.eraseHangs) setInterval(() => {}, 1000);
    else if (b.eraseCrashes) process.kill(process.pid, 'SIGKILL');
    else if (b.eraseFails) { setLine('locked', true); save(); fail('SECURITY_ERASE: Input/output error'); }
    else {
      // zeroDevice: the "drive" really erases: the device node (a test's loop device) is zeroed.
      if (b.zeroDevice) zero(args.at(-1));
      setLine('enabled', false); save();
    }
    break;
  case '--security-unlock':
    if (b.unlockFails || (pw !== 'NULL' && pw !== '')) fail('SECURITY_UNLOCK: Input/output error');
    setLine('locked', false); save(); break;
  case '--security-disable':
    if (b.disableFails || has('locked')) fail('SECURITY_DISABLE: Input/output error');
    setLine('enabled', false); save(); break;
  default:
    fail('fake hdparm: unexpected ' + JSON.stringify(args));
}
`;
