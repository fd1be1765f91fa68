/**
 * Plain-DOM rendering of plans and results, shared by the ▶ Run buttons and file runs.
 *
 * No JupyterLab imports: these functions are unit-tested in jsdom, and the look comes
 * from JupyterLab's CSS variables (style/base.css), so it follows the light and dark themes.
 */

import { formatElapsed, FrameAppender } from './appender';
import { codeLines, codePreview, escapeSegments, escapeText } from './escape';
import type { IStoredRun, Segment } from './history';
import { trans } from './i18n';
import { backendLabel } from './labels';
import { formatSize, renderRunFiles, type RunFileSource } from './outfiles';
import type { IDisplayOutput, IPlan, IRunInput, IRunResult } from './types';

/**
 * Turns one display output into the node shown in the output box (in the lab: the
 * rendermime registry's renderer, untrusted; see display.ts).
 */
export type DisplayRenderer = (item: IDisplayOutput) => HTMLElement;

/** Lines of code the approval views (dialog, Pending Plans) show; the rest is counted. */
export const PLAN_CODE_LINES = 500; // display.SCROLLING_PREVIEW_LINES
/** Characters of one code line they show; the rest of the line is counted. */
export const PLAN_LINE_CHARS = 1000; // display.SCROLLING_PREVIEW_LINE_CHARS

/** Create an element with a class and optional text. */
export function el<K extends keyof HTMLElementTagNameMap>(
  tag: K,
  className = '',
  text?: string
): HTMLElementTagNameMap[K] {
  const node = document.createElement(tag);
  if (className) {
    node.className = className;
  }
  if (text !== undefined) {
    node.textContent = text;
  }
  return node;
}

/** A small pill, e.g. "timed out" or a warning's severity. */
export function badge(text: string, kind: string): HTMLElement {
  return el('span', `jp-gitpilot-badge jp-gitpilot-badge-${kind}`, text);
}

/**
 * Show `text` in a panel's message line: an error (`failed`) is announced at once as an
 * alert, anything else is plain text; an empty `text` clears the line.
 */
export function setMessage(
  node: HTMLElement,
  text: string,
  failed: boolean
): void {
  node.textContent = text;
  node.classList.toggle('jp-gitpilot-error', failed);
  if (failed) {
    node.setAttribute('role', 'alert');
  } else {
    node.removeAttribute('role');
  }
}

/**
 * Keep `parent`'s rows in step with `items`, in place by key, so a refresh never moves
 * the focus: a row whose item is gone `leave`s, a known one is `update`d, a new one is
 * made and appended.
 */
export function syncRows<T, R extends { readonly node: HTMLElement }>(
  rows: Map<string, R>,
  items: readonly T[],
  keyOf: (item: T) => string,
  parent: HTMLElement,
  make: (item: T) => R,
  update: (row: R, item: T) => void,
  leave: (row: R) => void = row => row.node.remove()
): void {
  const keys = new Set(items.map(keyOf));
  for (const [key, row] of rows) {
    if (!keys.has(key)) {
      leave(row);
      rows.delete(key);
    }
  }
  for (const item of items) {
    const key = keyOf(item);
    const row = rows.get(key);
    if (row) {
      update(row, item);
      continue;
    }
    const fresh = make(item);
    rows.set(key, fresh);
    parent.appendChild(fresh.node);
  }
}

/** A display output's `text/plain`, shown as text (where no registry renders it). */
export const plainDisplay: DisplayRenderer = item => {
  const text = item.data['text/plain'];
  return el(
    'div',
    'jp-gitpilot-display jp-gitpilot-display-text',
    typeof text === 'string' ? text : trans.__('[display output]')
  );
};

function row(list: HTMLElement, term: string, value: string): void {
  list.appendChild(el('dt', '', term));
  list.appendChild(el('dd', '', value));
}

/**
 * The body of the approval dialog: what would run, where, and what the scan found.
 * With `onRemoveInput`, each input listed has a button that takes it out (by its name).
 */
export function renderPlan(
  plan: IPlan,
  onRemoveInput?: (name: string) => void
): HTMLElement {
  const root = el('div', 'jp-gitpilot-plan');
  if (plan.blocked) {
    const banner = el('div', 'jp-gitpilot-plan-blocked');
    banner.setAttribute('role', 'alert');
    banner.textContent = trans.__(
      'Blocked: %1. This plan cannot be approved.',
      plan.blocked_reason || trans.__('a destructive pattern matched')
    );
    root.appendChild(banner);
  }
  const facts = el('dl', 'jp-gitpilot-plan-facts');
  if (plan.file) {
    row(facts, trans.__('File'), escapeText(plan.file));
  }
  row(facts, trans.__('Language'), plan.language);
  row(facts, trans.__('Runs in'), backendLabel(plan.backend));
  row(facts, trans.__('Time limit'), trans.__('%1 s', plan.timeout_sec));
  row(
    facts,
    trans.__('Network'),
    plan.network ? trans.__('not blocked') : trans.__('blocked')
  );
  row(facts, trans.__('Command'), plan.command.join(' '));
  if (plan.session) {
    // A cell of a session: it runs in that session's kernel, where state stays.
    row(facts, trans.__('Session'), escapeText(plan.session));
  }
  root.appendChild(facts);
  if (plan.inputs?.length) {
    root.appendChild(renderInputs(plan.inputs, onRemoveInput));
  }

  if (plan.checks.length) {
    const checks = el('ul', 'jp-gitpilot-plan-checks');
    checks.setAttribute('aria-label', trans.__('Checks'));
    for (const check of plan.checks) {
      const item = el('li', check.ok ? 'jp-mod-ok' : 'jp-mod-failed');
      item.appendChild(el('span', 'jp-gitpilot-mark', check.ok ? '✓' : '✗'));
      item.appendChild(document.createTextNode(` ${check.label}`));
      checks.appendChild(item);
    }
    root.appendChild(checks);
  }

  const warnings = el('ul', 'jp-gitpilot-plan-warnings');
  warnings.setAttribute('aria-label', trans.__('Warnings'));
  for (const warning of plan.warnings) {
    const item = el('li');
    item.appendChild(badge(warning.severity, warning.severity));
    item.appendChild(el('strong', '', ` ${warning.label}`));
    if (warning.detail) {
      item.appendChild(document.createTextNode(` — ${warning.detail}`));
    }
    warnings.appendChild(item);
  }
  if (!plan.warnings.length) {
    warnings.appendChild(
      el('li', 'jp-gitpilot-muted', trans.__('No warnings from the code scan.'))
    );
  }
  root.appendChild(warnings);

  root.appendChild(renderPlanCode(plan));
  return root;
}

/**
 * "Files in": the files and folders the plan hands to the run, each with its size and
 * the start of its hash (the digest binds them: a file changed after approval does not run);
 * with `onRemove`, each with a button that takes it out.
 */
export function renderInputs(
  inputs: readonly IRunInput[],
  onRemove?: (name: string) => void
): HTMLElement {
  const box = el('div', 'jp-gitpilot-plan-inputbox');
  const titleId = 'jp-gitpilot-plan-inputs-title';
  const title = el(
    'div',
    'jp-gitpilot-plan-inputs-title',
    trans.__('Files in')
  );
  title.id = titleId;
  const list = el('ul', 'jp-gitpilot-plan-inputs');
  list.setAttribute('aria-labelledby', titleId);
  for (const input of inputs) {
    const item = el('li');
    item.dataset.name = input.name;
    const hash = input.sha256.replace(/^sha256:/, '').slice(0, 12);
    const what =
      input.kind === 'dir'
        ? trans._n('%1 file', '%1 files', input.files ?? 0)
        : formatSize(input.size);
    item.append(
      el(
        'strong',
        '',
        escapeText(input.kind === 'dir' ? `${input.name}/` : input.name)
      ),
      document.createTextNode(' '),
      el(
        'span',
        'jp-gitpilot-muted',
        input.kind === 'dir'
          ? trans.__('%1, %2 · sha256 %3', what, formatSize(input.size), hash)
          : trans.__('%1 · sha256 %2', what, hash)
      )
    );
    item.title = input.sha256;
    if (onRemove) {
      const remove = el(
        'button',
        'jp-mod-styled jp-gitpilot-input-remove',
        '✕'
      );
      remove.type = 'button';
      const label = trans.__(
        "Remove %1 from the run's files",
        escapeText(input.name)
      );
      remove.title = label;
      remove.setAttribute('aria-label', label);
      remove.addEventListener('click', () => onRemove(input.name));
      item.append(document.createTextNode(' '), remove);
    }
    list.appendChild(item);
  }
  box.append(title, list);
  return box;
}

/**
 * The plan's code as an approver must see it: control and bidi characters as marked
 * escapes, the lines and characters left out counted, and the digest the approval binds.
 */
export function renderPlanCode(plan: IPlan): HTMLElement {
  const box = el('div', 'jp-gitpilot-plan-codebox');
  const preview = codePreview(plan.code, PLAN_CODE_LINES, PLAN_LINE_CHARS);
  const code = el('pre', 'jp-gitpilot-plan-code');
  code.setAttribute('aria-label', trans.__('Code to run'));
  codeLines(plan.code)
    .slice(0, PLAN_CODE_LINES)
    .forEach((line, index) => {
      if (index > 0) {
        code.appendChild(document.createTextNode('\n'));
      }
      const chars = Array.from(line);
      for (const [piece, escaped] of escapeSegments(
        chars.slice(0, PLAN_LINE_CHARS).join('')
      )) {
        code.appendChild(
          escaped
            ? el('span', 'jp-gitpilot-escape', piece)
            : document.createTextNode(piece)
        );
      }
      if (chars.length > PLAN_LINE_CHARS) {
        const rest = chars.length - PLAN_LINE_CHARS;
        code.appendChild(
          el(
            'span',
            'jp-gitpilot-cut',
            ` … ${trans._n('[%1 more character]', '[%1 more characters]', rest)}`
          )
        );
      }
    });
  box.appendChild(code);
  for (const note of preview.notes) {
    box.appendChild(el('div', 'jp-gitpilot-plan-note', note));
  }
  const digest = el(
    'div',
    'jp-gitpilot-plan-digest jp-gitpilot-muted',
    trans.__('Digest %1', plan.digest)
  );
  digest.title = trans.__(
    'The approval is bound to this digest of the code, language, stdin, time limit, network, files in and where it runs.'
  );
  box.appendChild(digest);
  return box;
}

/** True when the plan carries a high-severity warning (approving it must be deliberate). */
export function isRisky(plan: IPlan): boolean {
  return plan.warnings.some(warning => warning.severity === 'high');
}

/** A duration for people: "850 ms", "3.2 s". */
export function formatDuration(ms: number): string {
  return ms < 1000
    ? trans.__('%1 ms', Math.round(ms))
    : trans.__('%1 s', (ms / 1000).toFixed(1));
}

/**
 * The one line that sums up a run, shown above its output: "Stopped after 1.2 s",
 * "exit 0 · 12 ms · Local", with the timed-out and truncated badges first.
 */
export function renderSummary(result: IRunResult): HTMLElement {
  const summary = el('div', 'jp-gitpilot-result-summary');
  if (result.cancelled) {
    summary.appendChild(badge(trans.__('stopped'), 'medium'));
    summary.appendChild(
      el(
        'span',
        'jp-gitpilot-stopped',
        trans.__('Stopped after %1.', formatDuration(result.duration_ms))
      )
    );
    return summary;
  }
  if (result.timed_out) {
    summary.appendChild(badge(trans.__('timed out'), 'high'));
  }
  if (result.truncated) {
    summary.appendChild(badge(trans.__('truncated'), 'medium'));
  }
  const ok = result.exit_code === 0 && !result.timed_out;
  summary.appendChild(
    badge(trans.__('exit %1', result.exit_code), ok ? 'ok' : 'failed')
  );
  summary.appendChild(
    el('span', 'jp-gitpilot-duration', formatDuration(result.duration_ms))
  );
  summary.appendChild(
    el('span', 'jp-gitpilot-backend', backendLabel(result.backend))
  );
  return summary;
}

/**
 * The event a result's Re-run button sends (it bubbles to whoever made the run); its
 * `detail` is an `IRerun`.
 */
export const RERUN_EVENT = 'jp-gitpilot-rerun';

/** What a Re-run hands over: the inputs the run was planned with, to plan it again so. */
export interface IRerun {
  /** Input paths under the server's root; empty for none. */
  inputs: string[];
}

/** The inputs a Re-run event asks for (none from an event without them). */
export function rerunInputs(event: Event): string[] {
  const detail = (event as CustomEvent<Partial<IRerun> | null>).detail;
  return Array.isArray(detail?.inputs) ? [...detail.inputs] : [];
}
/** The event a result's Clear button sends (it bubbles: whoever kept the run forgets it). */
export const CLEAR_EVENT = 'jp-gitpilot-clear';

/**
 * The output area under a code block (or in a file-run pane): a state line on top
 * (Running… with the elapsed time and Stop, then the summary or the error, with Re-run,
 * Copy and Clear), and the output below it, streamed while the snippet runs, in a box
 * that scrolls past a maximum height.
 */
export class OutputView {
  readonly node: HTMLElement;
  private readonly output: HTMLElement;
  private readonly state: HTMLElement;
  private readonly chunks: Segment[] = [];
  private readonly appender: FrameAppender;
  private clock: ReturnType<typeof setInterval> | null = null;
  private shownDisplays = 0;
  private filesNode: HTMLElement | null = null;
  /** The input paths the run was planned with: its Re-run plans with them again. */
  inputs: string[] = [];

  /**
   * @param title a heading above the output (a file run names its file)
   * @param renderDisplay how display outputs (figures, HTML...) are shown among the text
   * @param files where the run's `out/` files are downloaded from (without it they are
   *   only listed)
   */
  constructor(
    title = '',
    private readonly renderDisplay: DisplayRenderer = plainDisplay,
    private readonly files: RunFileSource | null = null
  ) {
    this.node = el('div', 'jp-gitpilot-output');
    if (title) {
      this.node.appendChild(el('div', 'jp-gitpilot-output-title', title));
    }
    this.state = el('div', 'jp-gitpilot-output-state');
    this.state.setAttribute('aria-live', 'polite');
    this.output = el('pre', 'jp-gitpilot-output-text');
    this.output.tabIndex = 0; // a scrolling box must be reachable by keyboard
    this.output.setAttribute('aria-label', trans.__('Output'));
    this.appender = new FrameAppender(this.output);
    this.node.append(this.state, this.output);
    this.running();
  }

  /**
   * Show "Running…" with a progress indicator and the time since it started and, when
   * `onStop` is given, a Stop button.
   */
  running(onStop?: () => void): void {
    const line = el('div', 'jp-gitpilot-running');
    const progress = el('progress', 'jp-gitpilot-spinner');
    progress.setAttribute('aria-label', trans.__('Running'));
    const elapsed = el('span', 'jp-gitpilot-elapsed', formatElapsed(0));
    // Ticks every second: a live region would read each tick aloud.
    elapsed.setAttribute('aria-live', 'off');
    elapsed.title = trans.__('Time since the run started');
    line.append(progress, el('span', '', trans.__('Running…')), elapsed);
    this.stopClock();
    const started = Date.now();
    let shown = false;
    this.clock = setInterval(() => {
      if (this.node.isConnected) {
        shown = true;
      } else if (shown) {
        this.stopClock(); // the view was replaced (a new run, the cell re-rendered)
        return;
      }
      elapsed.textContent = formatElapsed(Date.now() - started);
    }, 1000);
    if (onStop) {
      const stop = el('button', 'jp-mod-styled jp-gitpilot-stop-button');
      stop.type = 'button';
      stop.textContent = trans.__('■ Stop');
      stop.title = trans.__('Stop this run (it is ended on the server)');
      stop.setAttribute('aria-label', trans.__('Stop the run'));
      stop.addEventListener('click', event => {
        event.stopPropagation();
        stop.disabled = true;
        stop.textContent = trans.__('Stopping…');
        onStop();
      });
      line.appendChild(stop);
    }
    this.state.replaceChildren(line);
  }

  /** Queue streamed text (written once per frame); stderr is marked so the theme can colour it. */
  append(stream: 'stdout' | 'stderr', text: string): void {
    const chunk = this.chunks[this.chunks.length - 1];
    if (chunk && chunk[0] === stream) {
      chunk[1] += text;
    } else {
      this.chunks.push([stream, text]);
    }
    this.appender.push(stream, text);
  }

  /**
   * Show a display output (a figure, a table...) after the text streamed before it.
   * The text written so far goes first, so the order is the run's.
   */
  display(item: IDisplayOutput): void {
    this.appender.flush();
    const node = this.renderDisplay(item);
    node.classList.add('jp-gitpilot-display');
    this.output.appendChild(node);
    this.output.classList.add('jp-mod-rich');
    this.shownDisplays += 1;
  }

  /** How many display outputs are shown. */
  get displayCount(): number {
    return this.shownDisplays;
  }

  /** Write the queued output now (the run ended, or someone reads the page). */
  flush(): void {
    this.appender.flush();
  }

  /** The output so far, chunk by chunk (to keep it for later). */
  get segments(): Segment[] {
    return this.chunks.map(([stream, text]) => [stream, text]);
  }

  /** Show a run kept from before (the notebook was reopened): its output and summary. */
  replay(stored: IStoredRun): void {
    for (const [stream, text] of stored.segments) {
      this.append(stream, text);
    }
    this.finish(stored.result);
    const when = new Date(stored.at).toLocaleString();
    const note = el(
      'span',
      'jp-gitpilot-muted jp-gitpilot-earlier',
      trans.__('earlier run, %1', when)
    );
    this.state.firstElementChild?.appendChild(note);
    this.node.classList.add('jp-mod-earlier');
  }

  /** The text shown so far (both streams). */
  get text(): string {
    return this.chunks.map(([, text]) => text).join('');
  }

  /** Show the envelope's summary above the output. */
  finish(result: IRunResult): void {
    this.settle();
    this.node.classList.toggle(
      'jp-mod-failed',
      !result.cancelled && (result.exit_code !== 0 || result.timed_out)
    );
    this.node.classList.toggle('jp-mod-stopped', !!result.cancelled);
    this.state.replaceChildren(renderSummary(result), this.actions());
    if (result.notes?.length) {
      // What differed from what was asked: a display output dropped, a limit not applied.
      const notes = el('ul', 'jp-gitpilot-result-notes jp-gitpilot-muted');
      notes.setAttribute('aria-label', trans.__('Notes'));
      for (const note of result.notes) {
        notes.appendChild(el('li', '', note));
      }
      this.state.appendChild(notes);
    }
    this.filesNode?.remove();
    this.filesNode = null;
    if (result.files?.length && result.run_id) {
      // What the snippet wrote under out/: listed below its output, images shown.
      this.filesNode = renderRunFiles(
        result.run_id,
        result.files,
        this.files,
        this.renderDisplay
      );
      this.node.appendChild(this.filesNode);
    }
  }

  /** Say the run was stopped when no envelope came back (its stream was closed). */
  showStopped(): void {
    this.settle();
    this.node.classList.add('jp-mod-stopped');
    const summary = el('div', 'jp-gitpilot-result-summary');
    summary.append(
      badge(trans.__('stopped'), 'medium'),
      el('span', 'jp-gitpilot-stopped', trans.__('Stopped.'))
    );
    this.state.replaceChildren(summary, this.actions());
  }

  /** Show an error the server (or the network) gave, as its message. */
  fail(message: string): void {
    this.settle();
    this.node.classList.add('jp-mod-failed');
    const error = el('div', 'jp-gitpilot-error', message);
    error.setAttribute('role', 'alert');
    this.state.replaceChildren(error, this.actions());
  }

  /** Remove the output shown (the summary stays). */
  clear(): void {
    this.chunks.length = 0;
    this.shownDisplays = 0;
    this.appender.clear();
    this.output.classList.remove('jp-mod-rich');
    this.filesNode?.remove();
    this.filesNode = null;
  }

  private settle(): void {
    this.stopClock();
    this.appender.flush();
  }

  private stopClock(): void {
    if (this.clock !== null) {
      clearInterval(this.clock);
      this.clock = null;
    }
  }

  /** Re-run, Copy and Clear, for a run that ended. */
  private actions(): HTMLElement {
    const bar = el('div', 'jp-gitpilot-output-actions');
    const button = (
      text: string,
      label: string,
      onClick: (button: HTMLButtonElement) => void
    ) => {
      const node = el(
        'button',
        'jp-mod-styled jp-gitpilot-output-action',
        text
      );
      node.type = 'button';
      node.title = label;
      node.setAttribute('aria-label', label);
      node.addEventListener('click', event => {
        // Inside a Markdown cell a click must not also select or edit the cell.
        event.stopPropagation();
        onClick(node);
      });
      bar.appendChild(node);
      return node;
    };
    button(
      trans.__('↻ Re-run'),
      trans.__('Run this again (you approve the plan first)'),
      () =>
        this.node.dispatchEvent(
          new CustomEvent<IRerun>(RERUN_EVENT, {
            bubbles: true,
            detail: { inputs: [...this.inputs] }
          })
        )
    );
    button(trans.__('Copy'), trans.__('Copy the output'), node => {
      const done = (text: string) => {
        node.textContent = text;
        setTimeout(() => (node.textContent = trans.__('Copy')), 1500);
      };
      const clipboard = navigator.clipboard as Clipboard | undefined;
      if (!clipboard) {
        done(trans.__('Copy failed'));
        return;
      }
      clipboard
        .writeText(this.text)
        .then(() => done(trans.__('Copied')))
        .catch(() => done(trans.__('Copy failed')));
    });
    button(trans.__('Clear'), trans.__('Clear the output'), () => {
      this.clear();
      this.node.dispatchEvent(new CustomEvent(CLEAR_EVENT, { bubbles: true }));
    });
    return bar;
  }
}
