/**
 * Display outputs of a run (figures, HTML, Markdown, JSON...) rendered by JupyterLab's
 * rendermime registry as **untrusted** output, as an untrusted notebook's outputs are:
 * HTML and Markdown go through the lab's sanitizer, no script runs, and only the
 * renderers marked safe are chosen. What the snippet printed is data, never code.
 */

import {
  type IRenderMimeRegistry,
  markdownRendererFactory,
  MimeModel
} from '@jupyterlab/rendermime';
import type { ReadonlyPartialJSONObject } from '@lumino/coreutils';

import { trans } from './i18n';
import { el, plainDisplay, type DisplayRenderer } from './render';
import type { IDisplayOutput } from './types';

/** The MIME type of SVG, which the lab renders only in trusted output. */
const SVG = 'image/svg+xml';

/**
 * An SVG as an `<img>` (a data URI): an image element never runs the SVG's scripts nor
 * loads what it links, so the drawing is shown where the lab's SVG renderer would not be.
 */
export function svgImage(svg: string): HTMLImageElement {
  const image = el('img', 'jp-gitpilot-display-svg');
  image.alt = trans.__('SVG image from the run');
  image.src = `data:${SVG};charset=utf-8,${encodeURIComponent(svg)}`;
  return image;
}

/**
 * A renderer of `mimeType` from the lab's registry, except Markdown: the lab's own
 * Markdown renderer, without the ▶ Run buttons markdown.ts adds to cells and files
 * (code a snippet printed must never be offered to run).
 */
function createRenderer(registry: IRenderMimeRegistry, mimeType: string) {
  if (mimeType !== 'text/markdown') {
    return registry.createRenderer(mimeType);
  }
  return markdownRendererFactory.createRenderer({
    mimeType,
    sanitizer: registry.sanitizer,
    resolver: registry.resolver,
    linkHandler: registry.linkHandler,
    latexTypesetter: registry.latexTypesetter,
    markdownParser: registry.markdownParser
  });
}

/**
 * Render display outputs with the lab's `registry` (its renderers as they are when an
 * output comes, those of other extensions too), untrusted (`trusted: false`).
 */
export function rendermimeDisplay(
  registry: IRenderMimeRegistry
): DisplayRenderer {
  return (item: IDisplayOutput) => {
    const data = item.data as ReadonlyPartialJSONObject;
    const mimeType = registry.preferredMimeType(data, 'ensure');
    const svg = data[SVG];
    if ((!mimeType || mimeType === 'text/plain') && typeof svg === 'string') {
      const host = el('div');
      host.appendChild(svgImage(svg));
      return host;
    }
    if (!mimeType) {
      return plainDisplay(item);
    }
    const renderer = createRenderer(registry, mimeType);
    const model = new MimeModel({
      data,
      metadata: item.metadata as ReadonlyPartialJSONObject,
      trusted: false
    });
    const host = el('div');
    host.dataset.mimeType = mimeType;
    host.appendChild(renderer.node);
    renderer.renderModel(model).catch(error => {
      host.replaceChildren(
        el(
          'div',
          'jp-gitpilot-error',
          trans.__('This output could not be shown: %1', String(error))
        )
      );
    });
    return host;
  };
}
