/**
 * The caller's sandbox sessions, kernels in the sandbox that keep state between
 * `%%sandbox --session NAME` cells: one model (one fetch, one poll) behind both places
 * that list them, JupyterLab's Running panel (running.ts) and the "Sandbox Sessions"
 * sidebar tab here, which adds each session's facts and a Restart button. The server
 * lists only the caller's own.
 */

import { ISignal, Signal } from '@lumino/signaling';
import { Widget } from '@lumino/widgets';

import { escapeText } from './escape';
import { trans } from './i18n';
import { VisiblePoll } from './poll';
import { badge, el, setMessage, syncRows } from './render';
import { ResponseError, type SandboxClient } from './request';
import type { ISession } from './types';

/** The sidebar tab's id (the tab, the command that shows it). */
export const SESSIONS_PANEL_ID = 'gitpilot-sandbox-sessions';

/** How often the sessions are fetched while a list of them is shown. */
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

/** A session's state in a word. */
export function stateText(session: ISession): string {
  return session.state === 'busy' ? trans.__('busy') : trans.__('idle');
}

/**
 * The sessions as last fetched, and the actions on them. `refresh()` fetches (one fetch
 * at a time, however many lists ask); while one of the lists `watch`ing is shown, it
 * polls every `SESSIONS_POLL_SECONDS`. Every change (a fetch, a stop, a restart, a
 * failure) emits `changed`.
 */
export class SessionsModel {
  private _sessions: ISession[] = [];
  private _error: string | null = null;
  private _loaded = false;
  private fetching: Promise<void> | null = null;
  private readonly watchers = new Set<() => boolean>();
  private readonly poller = new VisiblePoll(() => {
    if (Array.from(this.watchers).some(shown => shown())) {
      void this.refresh();
    }
  });
  private readonly _changed = new Signal<this, void>(this);

  constructor(readonly client: SandboxClient) {}

  /** The sessions, oldest first. */
  get sessions(): readonly ISession[] {
    return this._sessions;
  }

  /** Why the last fetch failed, or null. */
  get error(): string | null {
    return this._error;
  }

  /** True once a fetch answered (before it, "no sessions" would not be known). */
  get loaded(): boolean {
    return this._loaded;
  }

  /** Emitted whenever the sessions or the error change. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /**
   * Poll while `shown()` says a list is on screen; answers a function that stops
   * watching. The first watcher starts the poll, the last one gone stops it.
   */
  watch(shown: () => boolean): () => void {
    this.watchers.add(shown);
    if (this.watchers.size === 1) {
      this.poller.start(SESSIONS_POLL_SECONDS);
    }
    return () => {
      this.watchers.delete(shown);
      if (this.watchers.size === 0) {
        this.poller.stop();
      }
    };
  }

  /** Fetch the sessions; a fetch under way is joined, not repeated. */
  refresh(): Promise<void> {
    if (!this.fetching) {
      this.fetching = this.fetch().finally(() => (this.fetching = null));
    }
    return this.fetching;
  }

  private async fetch(): Promise<void> {
    try {
      this._sessions = await this.client.sessions();
      this._error = null;
      this._loaded = true;
    } catch (error) {
      this._error = error instanceof Error ? error.message : String(error);
    }
    this._changed.emit();
  }

  /**
   * Stop a session (its processes and folder go), then fetch the list again. One
   * already gone (stopped elsewhere, idle, lost) is no error; any other failure throws.
   */
  async stop(name: string): Promise<void> {
    try {
      await this.client.stopSession(name);
    } catch (error) {
      if (!(error instanceof ResponseError && error.status === 404)) {
        throw error;
      }
    } finally {
      await this.refresh();
    }
  }

  /** Stop every session listed (JupyterLab's Shut Down All, after its own confirm). */
  async stopAll(): Promise<void> {
    const names = this._sessions.map(session => session.name);
    const failed = await Promise.allSettled(
      names.map(name => this.client.stopSession(name))
    );
    await this.refresh();
    const refused = failed.find(
      outcome =>
        outcome.status === 'rejected' &&
        !(
          outcome.reason instanceof ResponseError &&
          outcome.reason.status === 404
        )
    );
    if (refused && refused.status === 'rejected') {
      throw refused.reason;
    }
  }

  /** Restart a session (its state is gone; same network and limits): the session afresh. */
  async restart(name: string): Promise<ISession> {
    try {
      return await this.client.restartSession(name);
    } finally {
      await this.refresh();
    }
  }

  /** No more polling. */
  dispose(): void {
    this.watchers.clear();
    this.poller.stop();
  }
}

/** One session's row in the sidebar tab: name, state, facts, Restart and Stop. */
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
    private readonly model: SessionsModel
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
    this.state.replaceWith(
      (this.state = badge(
        stateText(session),
        session.state === 'busy' ? 'medium' : 'ok'
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
    const name = this.session.name;
    this.restart.disabled = this.stop.disabled = true;
    this.message.classList.add('jp-gitpilot-muted');
    setMessage(
      this.message,
      action === 'stop' ? trans.__('Stopping…') : trans.__('Restarting…'),
      false
    );
    try {
      if (action === 'stop') {
        await this.model.stop(name);
      } else {
        this.update(await this.model.restart(name));
        setMessage(
          this.message,
          trans.__('Restarted: its state is gone.'),
          false
        );
      }
    } catch (error) {
      this.message.classList.remove('jp-gitpilot-muted');
      setMessage(
        this.message,
        error instanceof Error ? error.message : String(error),
        true
      );
    } finally {
      this.restart.disabled = this.stop.disabled = false;
    }
  }
}

/**
 * The sidebar tab: the sessions of a `SessionsModel`, redrawn in place when it changes
 * (and fetched every few seconds while the tab is shown).
 */
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
  private readonly unwatch: () => void;

  constructor(readonly model: SessionsModel) {
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
        "Your sessions: kernels in the sandbox that keep variables between cells. Restart clears their state; Stop ends them. An idle session stops by itself. JupyterLab's Running panel lists them too."
      )
    );
    this.message.setAttribute('aria-live', 'polite');
    this.list.setAttribute('aria-label', trans.__('Sandbox sessions'));
    this.node.append(header, help, this.message, this.empty, this.list);
    model.changed.connect(this.draw, this);
    this.unwatch = model.watch(() => this.isVisible);
    this.draw();
  }

  /** The names of the sessions shown, in order. */
  get shown(): string[] {
    return Array.from(this.rows.keys());
  }

  /** Fetch the sessions (the tab redraws when they arrive). */
  refresh(): Promise<void> {
    return this.model.refresh();
  }

  /**
   * Draw the model's sessions in place: new ones are added, gone ones leave (the focus
   * moves to the next row's Stop, or Refresh, not to `<body>`).
   */
  private draw(): void {
    setMessage(this.message, this.model.error ?? '', this.model.error !== null);
    syncRows(
      this.rows,
      this.model.sessions,
      session => session.name,
      this.list,
      session => new SessionRow(session, this.model),
      (row, session) => row.update(session),
      row => this.leave(row)
    );
    this.empty.hidden = this.rows.size > 0 || !this.model.loaded;
  }

  private leave(row: SessionRow): void {
    const focused = row.node.contains(document.activeElement);
    const next = row.node.nextElementSibling ?? row.node.previousElementSibling;
    row.node.remove();
    if (focused) {
      const target =
        next?.querySelector<HTMLButtonElement>('button:last-of-type') ??
        this.node.querySelector<HTMLButtonElement>(
          '.jp-gitpilot-header button'
        );
      target?.focus();
    }
  }

  protected onAfterShow(): void {
    void this.refresh();
  }

  dispose(): void {
    if (this.isDisposed) {
      return;
    }
    this.unwatch();
    this.model.changed.disconnect(this.draw, this);
    super.dispose();
  }
}
