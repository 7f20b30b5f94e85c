// A scenario's steps build on each other (clean, then deploy, then undeploy): once one fails, the later
// ones fail at once naming it, instead of piling up follow-on errors from a node in the wrong state.
export class StepChain {
  private failed: string | null = null;

  async step(name: string, body: () => Promise<void>): Promise<void> {
    if (this.failed) throw new Error(`not run: the earlier step "${this.failed}" failed`);
    try {
      await body();
    } catch (err) {
      this.failed = name;
      throw err;
    }
  }
}
