// Names each test file as it starts when the output is no terminal (a log file, a pipe). vitest's default
// reporter then prints a file only when it ends, and it runs the longest files first (a minute and more for the
// device project's), so a run would say nothing for its first minute. On a terminal, the default reporter's
// summary already shows the files running.
import type { Reporter, TestModule } from 'vitest/node';

export default class StartReporter implements Reporter {
  onTestModuleStart(module: TestModule): void {
    if (process.stdout.isTTY) return;
    process.stdout.write(` ▶ ${module.project.name} ${module.relativeModuleId}\n`);
  }
}
