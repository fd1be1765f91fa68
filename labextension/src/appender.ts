/**
 * Streamed output written to the page at most once per animation frame.
 *
 * A run can stream hundreds of kilobytes in thousands of chunks. Writing each chunk
 * (and re-reading the scroll height after it) forces a layout per chunk and froze the
 * page for seconds; here chunks are queued, merged by stream, and appended to the
 * last text node once per frame, so the page lays out once per frame whatever comes.
 */

import { trans } from './i18n';

/** Which stream a piece of output came from. */
export type StreamName = 'stdout' | 'stderr';

/** Schedules `flush` for later (the next animation frame in a browser). */
export type Scheduler = (flush: () => void) => void;

/** The next animation frame, or a short timeout where there is none (jsdom, a hidden tab's fallback). */
export const nextFrame: Scheduler = flush => {
  if (typeof requestAnimationFrame === 'function') {
    requestAnimationFrame(() => flush());
  } else {
    setTimeout(flush, 16);
  }
};

/** Merge queued chunks: neighbours from the same stream become one piece. */
export function coalesce(
  chunks: ReadonlyArray<readonly [StreamName, string]>
): Array<[StreamName, string]> {
  const merged: Array<[StreamName, string]> = [];
  for (const [stream, text] of chunks) {
    const last = merged[merged.length - 1];
    if (last && last[0] === stream) {
      last[1] += text;
    } else if (text) {
      merged.push([stream, text]);
    }
  }
  return merged;
}

/**
 * Appends output to `box` as one `<span class="jp-gitpilot-{stream}">` per run of one
 * stream, growing the span's text node in place (never re-setting its whole text).
 */
export class FrameAppender {
  private queue: Array<[StreamName, string]> = [];
  private scheduled = false;

  constructor(
    private readonly box: HTMLElement,
    private readonly schedule: Scheduler = nextFrame
  ) {}

  /** True while some output waits for the next frame. */
  get pending(): boolean {
    return this.queue.length > 0;
  }

  /** Queue `text`; it is written at the next frame (or the next `flush()`). */
  push(stream: StreamName, text: string): void {
    if (!text) {
      return;
    }
    this.queue.push([stream, text]);
    if (!this.scheduled) {
      this.scheduled = true;
      this.schedule(() => {
        this.scheduled = false;
        this.flush();
      });
    }
  }

  /** Write everything queued now (before reading the text, or when the run ends). */
  flush(): void {
    if (!this.queue.length) {
      return;
    }
    const pieces = coalesce(this.queue);
    this.queue = [];
    const box = this.box;
    // Follow the output while the user is at the bottom; stay put once they scroll up.
    const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 8;
    for (const [stream, text] of pieces) {
      const last = box.lastElementChild;
      const node = last?.firstChild;
      if (
        last?.classList.contains(`jp-gitpilot-${stream}`) &&
        node instanceof Text
      ) {
        node.appendData(text);
      } else {
        const span = document.createElement('span');
        span.className = `jp-gitpilot-${stream}`;
        span.appendChild(document.createTextNode(text));
        box.appendChild(span);
      }
    }
    if (atBottom) {
      box.scrollTop = box.scrollHeight;
    }
  }

  /** Drop what is queued and what is shown. */
  clear(): void {
    this.queue = [];
    this.box.replaceChildren();
  }
}

/** Elapsed time for a running clock: "0 s", "59 s", "1:05", "1:02:03". */
export function formatElapsed(ms: number): string {
  const total = Math.max(0, Math.floor(ms / 1000));
  if (total < 60) {
    return trans.__('%1 s', total);
  }
  const seconds = String(total % 60).padStart(2, '0');
  const minutes = Math.floor(total / 60);
  if (minutes < 60) {
    return `${minutes}:${seconds}`;
  }
  return `${Math.floor(minutes / 60)}:${String(minutes % 60).padStart(2, '0')}:${seconds}`;
}
