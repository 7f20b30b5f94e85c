// guestfwd connector: QEMU starts one per guest connection, with that connection as stdin/stdout, and
// this relays it to 127.0.0.1:<port> on the host (the `-cmd:` form, unlike `tcp:`, carries every
// connection, not just the first).
import { connect } from 'node:net';

const sock = connect(Number(process.argv[2]), '127.0.0.1');
process.stdin.pipe(sock);
sock.pipe(process.stdout);
sock.on('error', () => process.exit(1));
sock.on('close', () => process.exit(0));
process.stdin.on('error', () => process.exit(1));
