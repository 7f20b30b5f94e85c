// Loaded into an agent process with `--import`: SIGUSR2 makes an exception escape from a timer callback,
// where nothing in the agent can catch it, as the undici assertion did.
process.on('SIGUSR2', () => {
  setImmediate(() => {
    throw new Error('injected fault');
  });
});
