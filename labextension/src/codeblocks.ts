/**
 * ▶ Run buttons on fenced code blocks of rendered Markdown (cells and Markdown files).
 *
 * JupyterLab renders a fence as `<pre><code class="language-X">`; each runnable one gets
 * a button bar after it, and the run's output appears under that bar.
 */

import { trans } from './i18n';
import { fenceLanguage } from './labels';
import { el, RERUN_EVENT, rerunInputs } from './render';

/** What a ▶ Run click hands over: the block's language, its code and where output goes. */
export interface ICodeBlock {
  language: string;
  code: string;
  /** The element output is shown in (emptied before each run). */
  outputHost: HTMLElement;
  /** The block's ▶ Run button (disabled while its run is under way). */
  button: HTMLButtonElement;
}

const DECORATED = 'jpGitpilotRun';

/** The info-string language of a `<code>` element (`language-py` → `py`). */
export function codeLanguage(code: Element): string | null {
  for (const name of Array.from(code.classList)) {
    if (name.startsWith('language-')) {
      return name.slice('language-'.length);
    }
  }
  return null;
}

/**
 * Add a ▶ Run button to every runnable code block under `root`; idempotent. `onRun` gets
 * the inputs to plan with: none for ▶ Run, the run's own for its result's Re-run.
 */
export function decorateCodeBlocks(
  root: HTMLElement,
  onRun: (block: ICodeBlock, inputs: string[]) => void,
  onDecorated: (block: ICodeBlock) => void = () => undefined
): number {
  let count = 0;
  for (const code of Array.from(root.querySelectorAll('pre > code'))) {
    const pre = code.parentElement as HTMLElement;
    const language = fenceLanguage(codeLanguage(code));
    if (!language || pre.dataset[DECORATED]) {
      continue;
    }
    pre.dataset[DECORATED] = language;
    const bar = el('div', 'jp-gitpilot-codeblock-bar');
    const button = el('button', 'jp-gitpilot-run-button', trans.__('▶ Run'));
    button.type = 'button';
    button.title = trans.__(
      'Run this %1 block in the sandbox (you approve the plan first)',
      language
    );
    button.setAttribute(
      'aria-label',
      trans.__('Run %1 code block in the sandbox', language)
    );
    const outputHost = el('div', 'jp-gitpilot-codeblock-output');
    const block = {
      language,
      code: code.textContent ?? '',
      outputHost,
      button
    };
    button.addEventListener('click', event => {
      // A click inside a rendered Markdown cell must not also select or edit the cell.
      event.stopPropagation();
      if (!button.disabled) {
        onRun(block, []);
      }
    });
    // A result's Re-run plans the block again, with the inputs that run had.
    outputHost.addEventListener(RERUN_EVENT, event => {
      event.stopPropagation();
      if (!button.disabled) {
        onRun(block, rerunInputs(event));
      }
    });
    bar.appendChild(button);
    pre.after(bar, outputHost);
    onDecorated(block);
    count += 1;
  }
  return count;
}

/** The code block holding `node` (focus or selection), if any. */
export function blockAround(node: Node | null): HTMLElement | null {
  const element =
    node instanceof Element ? node : (node?.parentElement ?? null);
  const bar = element?.closest('.jp-gitpilot-codeblock-bar');
  if (bar) {
    return bar.querySelector('.jp-gitpilot-run-button');
  }
  const pre = element?.closest('pre');
  const next = pre?.nextElementSibling;
  return next?.classList.contains('jp-gitpilot-codeblock-bar')
    ? next.querySelector('.jp-gitpilot-run-button')
    : null;
}
