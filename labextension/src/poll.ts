/**
 * The one polling loop of the lab: a call every few seconds while the page is visible.
 */

/** Calls `tick` every `seconds` while the page is visible; `start(0)` or `stop()` ends it. */
export class VisiblePoll {
  private timer: number | undefined;

  constructor(private readonly tick: () => void) {}

  /** (Re)start at `seconds` between calls; 0 stops. */
  start(seconds: number): void {
    window.clearInterval(this.timer);
    this.timer = undefined;
    if (seconds > 0) {
      this.timer = window.setInterval(() => {
        if (document.visibilityState !== 'hidden') {
          this.tick();
        }
      }, seconds * 1000);
    }
  }

  /** No more calls. */
  stop(): void {
    this.start(0);
  }
}
