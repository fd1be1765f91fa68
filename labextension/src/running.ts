/**
 * The sandbox sessions in JupyterLab's Running panel, beside kernels and terminals: a
 * "Sandbox sessions" section whose items are the caller's sessions (a `SessionsModel`,
 * the one the Sandbox Sessions tab shows too). Shut Down stops one; Shut Down All, after
 * JupyterLab's own confirm, stops them all. The panel has no per-item button beyond
 * Shut Down: Restart is in the item's context menu (`RESTART_SELECTOR`) and on the tab.
 */

import type { IRunningSessions } from '@jupyterlab/running';
import type { LabIcon } from '@jupyterlab/ui-components';

import { escapeText } from './escape';
import { trans } from './i18n';
import {
  agoText,
  sessionFacts,
  type SessionsModel,
  stateText
} from './sessions';
import type { ISession } from './types';

/** The class of a session's item in the Running panel (its context menu's selector). */
export const RUNNING_ITEM_CLASS = 'jp-gitpilot-running-session';

/** Where the Running panel's context menu offers Restart. */
export const RESTART_SELECTOR = `.${RUNNING_ITEM_CLASS}[data-context]`;

/** What a session's item says on hover: language, state, idle time, and its facts. */
export function sessionTooltip(
  session: ISession,
  now: number = Date.now() / 1000
): string {
  return [
    trans.__('Python session %1', escapeText(session.name)),
    session.state === 'busy'
      ? trans.__('busy: a cell is running')
      : trans.__('idle, last used %1', agoText(session.last_used, now)),
    sessionFacts(session, now)
  ].join('\n');
}

/** How the section's items look and what opening one does. */
export interface IRunningOptions {
  /** The items' icon. */
  icon: LabIcon;
  /** Opening an item (a click on its name): show that session where it has more. */
  open?: (name: string) => void;
  /** A Shut Down (All) that failed: say why. */
  failed?: (message: string) => void;
}

/** The Running panel's "Sandbox sessions" section over `model`. */
export function sessionsRunningManager(
  model: SessionsModel,
  options: IRunningOptions
): IRunningSessions.IManager {
  const failed = (error: unknown) =>
    options.failed?.(error instanceof Error ? error.message : String(error));
  const item = (session: ISession): IRunningSessions.IRunningItem => ({
    className: RUNNING_ITEM_CLASS,
    context: session.name,
    icon: () => options.icon,
    label: () => session.name,
    labelTitle: () => sessionTooltip(session),
    detail: () => stateText(session),
    open: options.open ? () => options.open?.(session.name) : undefined,
    shutdown: () => void model.stop(session.name).catch(failed)
  });
  return {
    name: trans.__('Sandbox sessions'),
    running: () => model.sessions.map(item),
    refreshRunning: () => void model.refresh(),
    runningChanged: model.changed,
    shutdownAll: () => void model.stopAll().catch(failed),
    shutdownLabel: running =>
      trans.__(
        'Shut Down session %1 (its processes and files go)',
        escapeText(running.context ?? '')
      ),
    shutdownAllConfirmationText: () =>
      trans._n(
        'Stop %1 sandbox session? Its variables, processes and files go.',
        'Stop all %1 of your sandbox sessions? Their variables, processes and files go.',
        model.sessions.length
      )
  };
}
