/**
 * "Run in Sandbox" for `.py`, `.js` and `.sh` files of the file browser.
 */

import type { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget } from '@jupyterlab/apputils';
import type { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { Widget } from '@lumino/widgets';

import { planAndRun } from './flow';
import { fileLanguage } from './labels';
import { OutputView } from './render';
import type { SandboxClient } from './request';

/** The path of the file browser's selected runnable file, or null. */
export function selectedRunnableFile(
  browsers: IFileBrowserFactory | null
): string | null {
  const browser = browsers?.tracker.currentWidget;
  const item = browser?.selectedItems().next();
  if (!item || item.done || item.value.type === 'directory') {
    return null;
  }
  return fileLanguage(item.value.path) ? item.value.path : null;
}

/** Plan a file (the server reads it under its root) and stream the run into its own tab. */
export async function runFile(
  app: JupyterFrontEnd,
  client: SandboxClient,
  path: string
): Promise<void> {
  const name = path.split('/').pop() ?? path;
  await planAndRun(client, { file: path, source: 'file_run' }, () => {
    const view = new OutputView(path);
    const content = new Widget();
    content.addClass('jp-gitpilot-run-content');
    content.node.appendChild(view.node);
    const widget = new MainAreaWidget({ content });
    widget.id = `gitpilot-run-${Date.now()}`;
    widget.title.label = `▶ ${name}`;
    widget.title.closable = true;
    widget.addClass('jp-gitpilot-run-tab');
    app.shell.add(widget, 'main', { mode: 'split-bottom' });
    app.shell.activateById(widget.id);
    return view;
  });
}
