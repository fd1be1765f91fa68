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
import { planAndRun } from './flow';
import { OutputView } from './render';
import type { SandboxClient } from './request';

/** Plan a code block (`source: code_block`) and stream its run under the block. */
export function runCodeBlock(client: SandboxClient, block: ICodeBlock): void {
  void planAndRun(
    client,
    { language: block.language, code: block.code, source: 'code_block' },
    () => {
      const view = new OutputView();
      block.outputHost.replaceChildren(view.node);
      return view;
    }
  );
}

/** Replace the Markdown renderer (cells and Markdown files) by one that adds ▶ Run buttons. */
export function addRunButtons(
  rendermime: IRenderMimeRegistry,
  client: SandboxClient
): void {
  class RunnableMarkdown extends RenderedMarkdown {
    async render(
      model: Parameters<RenderedMarkdown['render']>[0]
    ): Promise<void> {
      await super.render(model);
      decorateCodeBlocks(this.node, block => runCodeBlock(client, block));
    }
  }
  rendermime.addFactory(
    {
      ...markdownRendererFactory,
      createRenderer: options => new RunnableMarkdown(options)
    },
    markdownRendererFactory.defaultRank
  );
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
