/**
 * Plain-DOM rendering of plans and results, shared by the ▶ Run buttons and file runs.
 *
 * No JupyterLab imports: these functions are unit-tested in jsdom, and the look comes
 * from JupyterLab's CSS variables (style/base.css), so it follows the light and dark themes.
 */

import { codeLines, codePreview, escapeSegments, escapeText } from './escape';
import type { IPlan, IRunResult } from './types';

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

function row(list: HTMLElement, term: string, value: string): void {
  list.appendChild(el('dt', '', term));
  list.appendChild(el('dd', '', value));
}

/** The body of the approval dialog: what would run, where, and what the scan found. */
export function renderPlan(plan: IPlan): HTMLElement {
  const root = el('div', 'jp-gitpilot-plan');
  if (plan.blocked) {
    const banner = el('div', 'jp-gitpilot-plan-blocked');
    banner.setAttribute('role', 'alert');
    banner.textContent = `Blocked: ${plan.blocked_reason || 'a destructive pattern matched'}. This plan cannot be approved.`;
    root.appendChild(banner);
  }
  const facts = el('dl', 'jp-gitpilot-plan-facts');
  if (plan.file) {
    row(facts, 'File', escapeText(plan.file));
  }
  row(facts, 'Language', plan.language);
  row(facts, 'Backend', plan.backend);
  row(facts, 'Timeout', `${plan.timeout_sec} s`);
  row(facts, 'Network', plan.network ? 'allowed' : 'off');
  row(facts, 'Command', plan.command.join(' '));
  root.appendChild(facts);

  if (plan.checks.length) {
    const checks = el('ul', 'jp-gitpilot-plan-checks');
    checks.setAttribute('aria-label', 'Checks');
    for (const check of plan.checks) {
      const item = el('li', check.ok ? 'jp-mod-ok' : 'jp-mod-failed');
      item.appendChild(el('span', 'jp-gitpilot-mark', check.ok ? '✓' : '✗'));
      item.appendChild(document.createTextNode(` ${check.label}`));
      checks.appendChild(item);
    }
    root.appendChild(checks);
  }

  const warnings = el('ul', 'jp-gitpilot-plan-warnings');
  warnings.setAttribute('aria-label', 'Warnings');
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
      el('li', 'jp-gitpilot-muted', 'No warnings from the code scan.')
    );
  }
  root.appendChild(warnings);

  root.appendChild(renderPlanCode(plan));
  return root;
}

/**
 * The plan's code as an approver must see it: control and bidi characters as marked
 * escapes, the lines and characters left out counted, and the digest the approval binds.
 */
export function renderPlanCode(plan: IPlan): HTMLElement {
  const box = el('div', 'jp-gitpilot-plan-codebox');
  const preview = codePreview(plan.code, PLAN_CODE_LINES, PLAN_LINE_CHARS);
  const code = el('pre', 'jp-gitpilot-plan-code');
  code.setAttribute('aria-label', 'Code to run');
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
            ` … [${rest} more character${rest !== 1 ? 's' : ''}]`
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
    `Digest ${plan.digest}`
  );
  digest.title =
    'The approval is bound to this digest of the code, language, stdin, timeout, network and backend.';
  box.appendChild(digest);
  return box;
}

/** "exit 0 · 12 ms · subprocess" and the truncated / timed-out badges. */
export function renderFooter(result: IRunResult): HTMLElement {
  const footer = el('div', 'jp-gitpilot-result-footer');
  const ok = result.exit_code === 0 && !result.timed_out;
  footer.appendChild(badge(`exit ${result.exit_code}`, ok ? 'ok' : 'failed'));
  footer.appendChild(
    el('span', 'jp-gitpilot-duration', `${result.duration_ms} ms`)
  );
  footer.appendChild(el('span', 'jp-gitpilot-backend', result.backend));
  if (result.timed_out) {
    footer.appendChild(badge('timed out', 'high'));
  }
  if (result.truncated) {
    footer.appendChild(badge('truncated', 'medium'));
  }
  return footer;
}

/**
 * The output area under a code block (or in a file-run tab): streamed text while the
 * snippet runs, then the footer or the error.
 */
export class OutputView {
  readonly node: HTMLElement;
  private readonly output: HTMLElement;
  private readonly state: HTMLElement;

  constructor(title = '') {
    this.node = el('div', 'jp-gitpilot-output');
    this.node.setAttribute('aria-live', 'polite');
    if (title) {
      this.node.appendChild(el('div', 'jp-gitpilot-output-title', title));
    }
    this.output = el('pre', 'jp-gitpilot-output-text');
    this.state = el('div', 'jp-gitpilot-output-state', 'Running…');
    this.node.append(this.output, this.state);
  }

  /** Append streamed text; stderr is marked so the theme can colour it. */
  append(stream: 'stdout' | 'stderr', text: string): void {
    const last = this.output.lastElementChild;
    if (last && last.classList.contains(`jp-gitpilot-${stream}`)) {
      last.textContent += text;
      return;
    }
    this.output.appendChild(el('span', `jp-gitpilot-${stream}`, text));
  }

  /** The text shown so far (both streams). */
  get text(): string {
    return this.output.textContent ?? '';
  }

  /** Show the envelope's footer. */
  finish(result: IRunResult): void {
    this.node.classList.toggle(
      'jp-mod-failed',
      result.exit_code !== 0 || result.timed_out
    );
    this.state.replaceChildren(renderFooter(result));
  }

  /** Show an error the server (or the network) gave, as its message. */
  fail(message: string): void {
    this.node.classList.add('jp-mod-failed');
    this.state.replaceChildren(el('div', 'jp-gitpilot-error', message));
    this.state.setAttribute('role', 'alert');
  }
}
