/**
 * Files…: the lab's own file dialog, to pick workspace files and folders a run gets as
 * its `inputs` (read-only in its folder, bound into the plan's digest). Each pick is
 * added to the earlier ones (flow.ts `addInputs`).
 */

import { FileDialog } from '@jupyterlab/filebrowser';
import type { ITranslator } from '@jupyterlab/translation';

import type { FilePicker } from './flow';
import { trans } from './i18n';

/** The document manager the lab's file dialog browses with. */
export type DocumentManager = FileDialog.IFileOptions['manager'];

/**
 * The paths a file dialog answered, as inputs: the server's root itself (the answer
 * when nothing was selected at the top) is never one.
 */
export function inputPaths(models: ReadonlyArray<{ path: string }>): string[] {
  const paths = models.map(model => model.path).filter(path => path !== '');
  return Array.from(new Set(paths));
}

/** A picker of workspace files through the lab's file dialog (several with Ctrl or Shift). */
export function workspaceFilePicker(
  manager: DocumentManager,
  translator?: ITranslator | null
): FilePicker {
  return async current => {
    const answer = await FileDialog.getOpenFiles({
      manager,
      translator: translator ?? undefined,
      title: trans.__('Files for the run'),
      label: current.length
        ? trans.__(
            'Select the files and folders to hand to the run (Ctrl or Shift for several). They are added to: %1',
            current.join(', ')
          )
        : trans.__(
            'Select the files and folders to hand to the run (Ctrl or Shift for several). The run sees them read-only in its folder.'
          )
    });
    if (!answer.button.accept || !answer.value) {
      return null;
    }
    return inputPaths(answer.value);
  };
}
