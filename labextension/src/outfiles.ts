/**
 * "Files out": what a run left under `out/` in its folder, listed under its result
 * with a download link each (the REST route bound to the run and its owner), and the
 * images among them shown inline as untrusted output (the same renderer as display
 * outputs: the lab's rendermime registry, `trusted: false`).
 *
 * No JupyterLab imports, as render.ts: unit-tested in jsdom.
 */

import { trans } from './i18n';
import type { DisplayRenderer } from './render';
import { el } from './render';
import type { SandboxClient } from './request';
import { ResponseError } from './request';
import type { IRunFile } from './types';

/** Where a view fetches a run's files: the client's two calls for them. */
export type RunFileSource = Pick<SandboxClient, 'runFileUrl' | 'runFile'>;

/** The image types shown inline, by file extension (those display outputs allow). */
const IMAGE_TYPES: Record<string, string> = {
  png: 'image/png',
  jpg: 'image/jpeg',
  jpeg: 'image/jpeg',
  gif: 'image/gif',
  svg: 'image/svg+xml'
};

/** The image MIME type a file's name suggests, or null. */
export function imageType(name: string): string | null {
  const dot = name.lastIndexOf('.');
  return dot < 0
    ? null
    : (IMAGE_TYPES[name.slice(dot + 1).toLowerCase()] ?? null);
}

/** A size for people: "812 B", "3.4 KB", "1.2 MB" (powers of 1024). */
export function formatSize(bytes: number): string {
  if (bytes < 1024) {
    return trans.__('%1 B', bytes);
  }
  if (bytes < 1024 * 1024) {
    return trans.__('%1 KB', (bytes / 1024).toFixed(1));
  }
  return trans.__('%1 MB', (bytes / (1024 * 1024)).toFixed(1));
}

/** True when the server no longer keeps the file (expired, or never this caller's). */
function gone(error: unknown): boolean {
  return error instanceof ResponseError && error.status === 404;
}

/** A blob's bytes as base64 (what an image MIME bundle carries). */
export async function base64Of(blob: Blob): Promise<string> {
  const bytes = new Uint8Array(await blob.arrayBuffer());
  let text = '';
  const step = 0x8000;
  for (let at = 0; at < bytes.length; at += step) {
    text += String.fromCharCode(...bytes.subarray(at, at + step));
  }
  return btoa(text);
}

/** Hand `blob` to the browser as a download named `name`. */
export function saveBlob(blob: Blob, name: string): void {
  const url = URL.createObjectURL(blob);
  const link = el('a');
  link.href = url;
  link.download = name;
  link.hidden = true;
  document.body.appendChild(link);
  link.click();
  link.remove();
  window.setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

/**
 * The "Files out" section of a run: each file's name (a download link) and size; a
 * file the server no longer keeps says so instead of its link. Images are fetched
 * and shown inline below the list by `renderDisplay`.
 */
export function renderRunFiles(
  runId: string,
  files: readonly IRunFile[],
  source: RunFileSource | null,
  renderDisplay: DisplayRenderer
): HTMLElement {
  const section = el('section', 'jp-gitpilot-run-files');
  const titleId = `jp-gitpilot-files-${runId}`;
  const title = el('div', 'jp-gitpilot-run-files-title', trans.__('Files out'));
  title.id = titleId;
  section.setAttribute('aria-labelledby', titleId);
  const list = el('ul', 'jp-gitpilot-run-files-list');
  const images = el('div', 'jp-gitpilot-run-images');
  section.append(title, list, images);

  for (const file of files) {
    const item = el('li', 'jp-gitpilot-run-file');
    item.dataset.name = file.name;
    const size = el('span', 'jp-gitpilot-muted jp-gitpilot-run-file-size');
    size.textContent = formatSize(file.size);
    const base = file.name.split('/').pop() || file.name;
    const notKept = () => {
      item.classList.add('jp-mod-gone');
      item.replaceChildren(
        el('span', 'jp-gitpilot-run-file-name', file.name),
        el(
          'span',
          'jp-gitpilot-muted jp-gitpilot-run-file-gone',
          trans.__('no longer kept')
        )
      );
    };
    if (!source) {
      item.append(el('span', 'jp-gitpilot-run-file-name', file.name), size);
      list.appendChild(item);
      continue;
    }
    const link = el('a', 'jp-gitpilot-run-file-name', file.name);
    link.href = source.runFileUrl(runId, file.name);
    link.download = base;
    link.setAttribute(
      'aria-label',
      trans.__('Download %1 (%2)', file.name, formatSize(file.size))
    );
    const problem = el('span', 'jp-gitpilot-error');
    link.addEventListener('click', event => {
      // Fetched with the lab's credentials, so a file no longer kept can say so.
      event.preventDefault();
      event.stopPropagation();
      problem.remove();
      source
        .runFile(runId, file.name)
        .then(blob => saveBlob(blob, base))
        .catch(error => {
          if (gone(error)) {
            notKept();
            return;
          }
          problem.textContent =
            error instanceof Error ? error.message : String(error);
          problem.setAttribute('role', 'alert');
          item.appendChild(problem);
        });
    });
    item.append(link, size);
    list.appendChild(item);

    const mimeType = imageType(file.name);
    if (mimeType) {
      const host = el('div', 'jp-gitpilot-run-image');
      host.dataset.name = file.name;
      images.appendChild(host);
      source
        .runFile(runId, file.name)
        .then(async blob => {
          const value =
            mimeType === 'image/svg+xml'
              ? await blob.text()
              : await base64Of(blob);
          const node = renderDisplay({
            output_type: 'display_data',
            data: { [mimeType]: value, 'text/plain': file.name },
            metadata: {},
            stdout_at: 0
          });
          node.classList.add('jp-gitpilot-display');
          host.replaceChildren(node);
        })
        .catch(error => {
          host.remove();
          if (gone(error)) {
            notKept();
          }
        });
    }
  }
  return section;
}
