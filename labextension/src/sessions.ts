/**
 * The "Sandbox Sessions" panel (the left sidebar, beside Running): the caller's sessions,
 * kernels in the sandbox that keep state between `%%sandbox --session NAME` cells, each
 * with Restart (its state is gone, same network and limits) and Stop (its processes and
 * folder go). The server lists only the caller's own; the panel refreshes while shown.
 */

import { Widget } from '@lumino/widgets';

import { escapeText } from './escape';
import { trans } from './i18n';
import { VisiblePoll } from './poll';
import { badge, el } from './render';
import { ResponseError, type SandboxClient } from './request';
import type { ISession } from './types';

/** The panel's id (the sidebar tab, the command that shows it). */
export const SESSIONS_PANEL_ID = 'gitpilot-sandbox-sessions';

/** How often the shown panel asks the server for the sessions. */
export const SESSIONS_POLL_SECONDS = 5;

/** How long ago `then` (seconds since the epoch) was, for people: "just now", "3 min ago". */
export function agoText(then: number, now: number = Date.now() / 1000): string {
  const seconds = Math.max(0, Math.round(now - then));
  if (seconds < 60) {
    return trans.__('just now');
  }
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) {
    return trans._n('%1 min ago', '%1 min ago', minutes);
  }
  return trans._n('%1 hour ago', '%1 hours ago', Math.floor(minutes / 60));
}

/** The facts of a session in one line: cells run, network, memory cap, last use. */
export function sessionFacts(
  session: ISession,
  now: number = Date.now() / 1000
): string {
  const parts = [
    trans._n('%1 cell', '%1 cells', session.cells),
    session.network
      ? trans.__('network not blocked')
      : trans.__('network blocked')
  ];
  if (session.memory_mb) {
    parts.push(trans.__('%1 MB memory', session.memory_mb));
  }
  parts.push(trans.__('used %1', agoText(session.last_used, now)));
  return parts.join(' · ');
}

/** One session's row: name, state, facts, Restart and Stop. */
class SessionRow {
  readonly node = el('li', 'jp-gitpilot-session');
  private state = el('span');
  private readonly facts = el(
    'span',
    'jp-gitpilot-muted jp-gitpilot-session-facts'
  );
  private readonly message = el('span', 'jp-gitpilot-session-message');
  readonly restart: HTMLButtonElement;
  readonly stop: HTMLButtonElement;

  constructor(
    private session: ISession,
    private readonly panel: SessionsPanel
  ) {
    const name = escapeText(session.name);
    this.node.dataset.name = session.name;
    const title = el('span', 'jp-gitpilot-session-name', name);
    title.id = `jp-gitpilot-session-${session.name}`;
    this.node.setAttribute('aria-labelledby', title.id);
    this.restart = this.button(
      trans.__('Restart'),
      trans.__('Restart session %1 (its variables are lost)', name),
      () => this.act('restart')
    );
    this.stop = this.button(
      trans.__('Stop'),
      trans.__('Stop session %1 (its processes and files go)', name),
      () => this.act('stop')
    );
    this.message.setAttribute('aria-live', 'polite');
    this.node.append(
      title,
      this.state,
      this.facts,
      this.restart,
      this.stop,
      this.message
    );
    this.update(session);
  }

  /** Show the session's latest state (the row keeps its node, so the focus stays). */
  update(session: ISession): void {
    this.session = session;
    const busy = session.state === 'busy';
    this.state.replaceWith(
      (this.state = badge(
        busy ? trans.__('busy') : trans.__('idle'),
        busy ? 'medium' : 'ok'
      ))
    );
    this.facts.textContent = sessionFacts(session);
  }

  private button(
    text: string,
    label: string,
    onClick: () => void
  ): HTMLButtonElement {
    const node = el('button', 'jp-mod-styled', text);
    node.type = 'button';
    node.title = label;
    node.setAttribute('aria-label', label);
    node.addEventListener('click', onClick);
    return node;
  }

  private async act(action: 'restart' | 'stop'): Promise<void> {
    const client = this.panel.client;
    this.restart.disabled = this.stop.disabled = true;
    this.message.className = 'jp-gitpilot-session-message jp-gitpilot-muted';
    this.message.removeAttribute('role');
    this.message.textContent =
      action === 'stop' ? trans.__('Stopping…') : trans.__('Restarting…');
    try {
      if (action === 'stop') {
        await client.stopSession(this.session.name);
      } else {
        this.update(await client.restartSession(this.session.name));
        this.message.textContent = trans.__('Restarted: its state is gone.');
      }
    } catch (error) {
      if (!(error instanceof ResponseError && error.status === 404)) {
        this.message.className =
          'jp-gitpilot-session-message jp-gitpilot-error';
        this.message.setAttribute('role', 'alert');
        this.message.textContent =
          error instanceof Error ? error.message : String(error);
        this.restart.disabled = this.stop.disabled = false;
        return;
      }
      // Already gone (stopped elsewhere, idle, lost): the refresh lets it go.
    }
    this.restart.disabled = this.stop.disabled = false;
    await this.panel.refresh();
  }
}

/** The panel widget: `refresh()` fetches the sessions; it polls while shown. */
export class SessionsPanel extends Widget {
  private readonly list = el('ul', 'jp-gitpilot-sessions-list');
  private readonly message = el('div', 'jp-gitpilot-message');
  private readonly empty = el(
    'p',
    'jp-gitpilot-muted',
    trans.__(
      'No sandbox sessions. A notebook cell run with %1 (or an agent) starts one.',
      '%%sandbox --session NAME'
    )
  );
  private readonly rows = new Map<string, SessionRow>();
  private readonly poller = new VisiblePoll(() => void this.refresh());

  constructor(readonly client: SandboxClient) {
    super();
    this.id = SESSIONS_PANEL_ID;
    this.title.caption = trans.__('Sandbox Sessions');
    this.addClass('jp-gitpilot-sessions');
    const header = el('div', 'jp-gitpilot-header');
    const heading = el('h2', '', trans.__('Sandbox Sessions'));
    const refresh = el('button', 'jp-mod-styled', trans.__('Refresh'));
    refresh.type = 'button';
    refresh.setAttribute(
      'aria-label',
      trans.__('Refresh the sandbox sessions')
    );
    refresh.addEventListener('click', () => void this.refresh());
    header.append(heading, refresh);
    const help = el(
      'p',
      'jp-gitpilot-muted',
      trans.__(
        'Your sessions: kernels in the sandbox that keep variables between cells. Restart clears their state; Stop ends them. An idle session stops by itself.'
      )
    );
    this.message.setAttribute('aria-live', 'polite');
    this.list.setAttribute('aria-label', trans.__('Sandbox sessions'));
    this.node.append(header, help, this.message, this.empty, this.list);
  }

  /** The names of the sessions shown, in order. */
  get shown(): string[] {
    return Array.from(this.rows.keys());
  }

  /**
   * Ask the server for the sessions and update the rows in place: new ones are added,
   * gone ones leave (the focus moves to the next row's Stop, or Refresh, not to `<body>`).
   */
  async refresh(): Promise<void> {
    let sessions: ISession[];
    try {
      sessions = await this.client.sessions();
    } catch (error) {
      this.message.textContent =
        error instanceof Error ? error.message : String(error);
      this.message.className = 'jp-gitpilot-message jp-gitpilot-error';
      this.message.setAttribute('role', 'alert');
      return;
    }
    this.message.textContent = '';
    this.message.className = 'jp-gitpilot-message';
    this.message.removeAttribute('role');
    const names = new Set(sessions.map(session => session.name));
    for (const [name, row] of this.rows) {
      if (!names.has(name)) {
        const focused = row.node.contains(document.activeElement);
        const next =
          row.node.nextElementSibling ?? row.node.previousElementSibling;
        row.node.remove();
        this.rows.delete(name);
        if (focused) {
          const target =
            next?.querySelector<HTMLButtonElement>('button:last-of-type') ??
            this.node.querySelector<HTMLButtonElement>(
              '.jp-gitpilot-header button'
            );
          target?.focus();
        }
      }
    }
    for (const session of sessions) {
      const row = this.rows.get(session.name);
      if (row) {
        row.update(session);
        continue;
      }
      const fresh = new SessionRow(session, this);
      this.rows.set(session.name, fresh);
      this.list.appendChild(fresh.node);
    }
    this.empty.hidden = this.rows.size > 0;
  }

  protected onAfterShow(): void {
    this.poller.start(SESSIONS_POLL_SECONDS);
    void this.refresh();
  }

  protected onBeforeHide(): void {
    this.poller.stop();
  }

  dispose(): void {
    this.poller.stop();
    super.dispose();
  }
}
