/**
 * "Run in Sandbox" for `.py`, `.js` and `.sh` files of the file browser.
 *
 * Every file run streams into one result pane (opened below the editor the first
 * time, reused after), and reports through JupyterLab's notifications: a
 * notification with a progress indicator and Stop while it runs, then the outcome.
 */

import type { JupyterFrontEnd } from '@jupyterlab/application';
import { MainAreaWidget, Notification } from '@jupyterlab/apputils';
import type { IFileBrowserFactory } from '@jupyterlab/filebrowser';
import { Widget } from '@lumino/widgets';

import { type FilePicker, planAndRun } from './flow';
import { trans } from './i18n';
import { fileLanguage } from './labels';
import {
  type DisplayRenderer,
  formatDuration,
  OutputView,
  plainDisplay,
  RERUN_EVENT,
  rerunInputs
} from './render';
import type { SandboxClient } from './request';
import type { IRunResult } from './types';

/** The id of the one file-run result pane. */
export const RESULT_PANE_ID = 'gitpilot-sandbox-run-result';

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

/** What a finished file run's notification says, and its kind. */
export function outcomeOf(
  name: string,
  result: IRunResult
): { message: string; type: Notification.TypeOptions } {
  const took = formatDuration(result.duration_ms);
  if (result.cancelled) {
    return { message: trans.__('%1 was stopped.', name), type: 'info' };
  }
  if (result.timed_out) {
    return {
      message: trans.__('%1 ran out of time after %2.', name, took),
      type: 'error'
    };
  }
  if (result.exit_code !== 0) {
    return {
      message: trans.__(
        '%1 failed with exit code %2 (%3).',
        name,
        result.exit_code,
        took
      ),
      type: 'error'
    };
  }
  return { message: trans.__('%1 ran in %2.', name, took), type: 'success' };
}

let pane: MainAreaWidget | null = null;

/** The result pane, made (below the current editor) the first time and reused after. */
function resultPane(app: JupyterFrontEnd): MainAreaWidget {
  if (!pane || pane.isDisposed) {
    const content = new Widget();
    content.addClass('jp-gitpilot-run-content');
    pane = new MainAreaWidget({ content });
    pane.id = RESULT_PANE_ID;
    pane.title.closable = true;
    pane.addClass('jp-gitpilot-run-tab');
  }
  if (!pane.isAttached) {
    app.shell.add(pane, 'main', { mode: 'split-bottom' });
  }
  return pane;
}

/**
 * Plan a file (the server reads it under its root) with `inputs` handed to it, and stream
 * its run into the result pane; the result's Re-run plans it again with the same inputs.
 */
export async function runFile(
  app: JupyterFrontEnd,
  client: SandboxClient,
  path: string,
  renderDisplay: DisplayRenderer = plainDisplay,
  pickFiles: FilePicker | null = null,
  inputs: readonly string[] = []
): Promise<void> {
  const name = path.split('/').pop() ?? path;
  const show = () => {
    if (pane && !pane.isDisposed && pane.isAttached) {
      app.shell.activateById(pane.id);
    }
  };
  const showAction = {
    label: trans.__('Show output'),
    caption: trans.__('Open the run result pane'),
    callback: show
  };
  let note = '';
  let failed = false;
  const result = await planAndRun(
    client,
    {
      file: path,
      source: 'file_run',
      ...(inputs.length ? { inputs: [...inputs] } : {})
    },
    () => {
      const view = new OutputView(path, renderDisplay, client);
      view.node.addEventListener(
        RERUN_EVENT,
        event =>
          void runFile(
            app,
            client,
            path,
            renderDisplay,
            pickFiles,
            rerunInputs(event)
          )
      );
      const widget = resultPane(app);
      widget.title.label = trans.__('▶ %1', name);
      widget.title.caption = trans.__('Sandbox run of %1', path);
      widget.content.node.replaceChildren(view.node);
      app.shell.activateById(widget.id);
      return view;
    },
    {
      pickFiles,
      started: stop => {
        note = Notification.emit(
          trans.__('Running %1 in the sandbox…', name),
          'in-progress',
          {
            autoClose: false,
            actions: [
              {
                label: trans.__('Stop'),
                caption: trans.__('Stop this run (it is ended on the server)'),
                displayType: 'warn',
                callback: event => {
                  event.preventDefault(); // keep the notification until the run answers
                  stop();
                }
              },
              showAction
            ]
          }
        );
      },
      failed: message => {
        failed = true;
        Notification.update({
          id: note,
          message: trans.__('%1 could not run: %2', name, message),
          type: 'error',
          autoClose: false,
          actions: [showAction]
        });
      }
    }
  );
  if (result && note) {
    const { message, type } = outcomeOf(name, result);
    Notification.update({
      id: note,
      message,
      type,
      autoClose: type === 'error' ? false : 8000,
      actions: [showAction]
    });
  } else if (note && !failed) {
    // Stopped before an envelope came back (the stream was closed).
    Notification.update({
      id: note,
      message: trans.__('%1 was stopped.', name),
      type: 'info',
      autoClose: 5000,
      actions: [showAction]
    });
  }
}
