/**
 * ▶ Run in rendered Markdown: the renderer that adds the buttons, and the block the
 * palette's "Run Code Block in Sandbox" means.
 */

import {
  IRenderMimeRegistry,
  RenderedMarkdown,
  markdownRendererFactory
} from '@jupyterlab/rendermime';

import { blockAround, decorateCodeBlocks, ICodeBlock } from './codeblocks';
import { rendermimeDisplay } from './display';
import { type FilePicker, planAndRun } from './flow';
import { RunHistory } from './history';
import {
  CLEAR_EVENT,
  type DisplayRenderer,
  OutputView,
  plainDisplay
} from './render';
import type { RunFileSource } from './outfiles';
import type { SandboxClient } from './request';

/**
 * Plan a code block (`source: code_block`, with `inputs` handed to it) and stream its run
 * under the block, its display outputs shown by `renderDisplay` among the text.
 */
export async function runCodeBlock(
  client: SandboxClient,
  block: ICodeBlock,
  history: RunHistory | null = null,
  renderDisplay: DisplayRenderer = plainDisplay,
  pickFiles: FilePicker | null = null,
  inputs: readonly string[] = []
): Promise<void> {
  // One run per block at a time: the button is off from the click until the run ends.
  block.button.disabled = true;
  block.button.setAttribute('aria-busy', 'true');
  let view: OutputView | null = null;
  try {
    const result = await planAndRun(
      client,
      {
        language: block.language,
        code: block.code,
        source: 'code_block',
        ...(inputs.length ? { inputs: [...inputs] } : {})
      },
      () => {
        view = new OutputView('', renderDisplay, client);
        block.outputHost.replaceChildren(view.node);
        return view;
      },
      { pickFiles }
    );
    if (result && view) {
      history?.put(
        block.language,
        block.code,
        (view as OutputView).segments,
        result
      );
    }
  } finally {
    block.button.disabled = false;
    block.button.removeAttribute('aria-busy');
    // Disabling the button dropped the focus to <body> (or the notebook took it): give
    // it back to ▶ Run unless the user has since moved on to another control.
    const active = document.activeElement;
    if (!active || active.contains(block.button)) {
      block.button.focus();
    }
  }
}

/** Show a block's last result again when it is rendered anew (the notebook was reopened). */
export function restoreCodeBlock(
  block: ICodeBlock,
  history: RunHistory,
  files: RunFileSource | null = null,
  renderDisplay: DisplayRenderer = plainDisplay
): void {
  const stored = history.get(block.language, block.code);
  if (stored && !block.outputHost.firstChild) {
    // Its out/ files are listed again; those the server no longer keeps say so.
    const view = new OutputView('', renderDisplay, files);
    view.replay(stored);
    block.outputHost.replaceChildren(view.node);
  }
}

/** Forget a block's kept result when its output is cleared, so a reload shows none. */
export function forgetOnClear(block: ICodeBlock, history: RunHistory): void {
  block.outputHost.addEventListener(CLEAR_EVENT, () =>
    history.forget(block.language, block.code)
  );
}

/**
 * Replace the Markdown renderer (cells and Markdown files) by one that adds ▶ Run buttons;
 * answers how their runs' display outputs are rendered (untrusted, see display.ts).
 */
export function addRunButtons(
  rendermime: IRenderMimeRegistry,
  client: SandboxClient,
  history: RunHistory = new RunHistory(),
  pickFiles: () => FilePicker | null = () => null
): DisplayRenderer {
  const renderDisplay = rendermimeDisplay(rendermime);
  class RunnableMarkdown extends RenderedMarkdown {
    async render(
      model: Parameters<RenderedMarkdown['render']>[0]
    ): Promise<void> {
      await super.render(model);
      decorateCodeBlocks(
        this.node,
        (block, inputs) =>
          void runCodeBlock(
            client,
            block,
            history,
            renderDisplay,
            pickFiles(),
            inputs
          ),
        block => {
          restoreCodeBlock(block, history, client, renderDisplay);
          forgetOnClear(block, history);
        }
      );
    }
  }
  rendermime.addFactory(
    {
      ...markdownRendererFactory,
      createRenderer: options => new RunnableMarkdown(options)
    },
    markdownRendererFactory.defaultRank
  );
  return renderDisplay;
}

/**
 * Remembers the code block the user last focused, selected in or pressed on, because
 * opening the command palette takes the focus away from it.
 */
export class CodeBlockFocus {
  private last: HTMLElement | null = null;

  /** Start listening on the document. */
  track(): void {
    const remember = (node: Node | null) => {
      this.last = blockAround(node) ?? this.last;
    };
    document.addEventListener('focusin', event =>
      remember(event.target as Node)
    );
    // Capture phase: a notebook cell may stop a click from selecting text in its Markdown.
    document.addEventListener(
      'pointerdown',
      event => remember(event.target as Node),
      true
    );
    document.addEventListener('selectionchange', () =>
      remember(window.getSelection()?.anchorNode ?? null)
    );
  }

  /** The ▶ Run button of the block with the focus or the selection now, or held last. */
  current(): HTMLButtonElement | null {
    const around =
      blockAround(document.activeElement) ??
      blockAround(window.getSelection()?.anchorNode ?? null) ??
      (this.last?.isConnected ? this.last : null);
    return around as HTMLButtonElement | null;
  }
}
