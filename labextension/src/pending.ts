/**
 * The "Sandbox: Pending Plans" panel: plans waiting for a person (an agent's, in `ask` mode).
 *
 * Approve only approves: it never runs the plan, and the approval token the server
 * answers is dropped unread, neither shown nor kept. The agent claims the token itself
 * and runs the plan. Reject drops the plan so it can never run.
 *
 * Once the agent runs an approved plan, the server links the run to it: the plan shows
 * apart, under "Running now" (it no longer waits for anyone), with ■ Stop, which ends
 * the run on the server. It leaves when the run ends.
 */

import { Widget } from '@lumino/widgets';

import { trans } from './i18n';
import { AGENT_SOURCE, SandboxModel } from './model';
import { escapeText } from './escape';
import { VisiblePoll } from './poll';
import { ResponseError } from './request';
import {
  badge,
  el,
  formatDuration,
  isRisky,
  renderPlan,
  setMessage,
  syncRows
} from './render';
import type { IPlan, IRunningPlan } from './types';

/** How often the open panel asks the server for pending plans. */
export const POLL_SECONDS = 4;

/** How long a decided card stays (showing its outcome) before a refresh lets it go. */
export const DECIDED_LINGER_MS = 3000;

/** What the card says once decided. */
export function approvedText(plan: IPlan): string {
  return plan.source === AGENT_SOURCE
    ? trans.__('Approved — the agent will run it.')
    : trans.__('Approved — whoever asked for it can run it now.');
}

/** What a rejected card says. */
export function rejectedText(): string {
  return trans.__('Rejected — it will not run.');
}

/** Who asked for a plan, in words. */
export function requesterText(source: string): string {
  return source === AGENT_SOURCE
    ? trans.__('Requested by an agent')
    : trans.__('Requested by %1', escapeText(source.replace(/_/g, ' ')));
}

/**
 * Whose plan it is, in words, where identities are real (a JupyterHub, an identity
 * provider with users): "Planned by alice". Null under a shared token login, where
 * the server knows no owner.
 */
export function ownerText(plan: IPlan): string | null {
  return typeof plan.owner === 'string' && plan.owner
    ? trans.__('Planned by %1', escapeText(plan.owner))
    : null;
}

/**
 * A card for `plan` titled by its goal (the card's accessible name) with `tag` beside it,
 * and, on a server with real identities, whose plan it is: the card node and
 * its header.
 */
function planCard(
  plan: IPlan,
  kind: 'pending' | 'running',
  id: string,
  tag: HTMLElement
): { node: HTMLElement; header: HTMLElement } {
  const node = el('section', `jp-gitpilot-card jp-gitpilot-${kind}-card`);
  node.dataset.planId = plan.plan_id;
  const titleId = `jp-gitpilot-${kind}-${id}`;
  node.setAttribute('aria-labelledby', titleId);
  const header = el('div', 'jp-gitpilot-pending-header');
  const goal = el(
    'h3',
    'jp-gitpilot-pending-goal',
    escapeText(plan.goal || trans.__('A plan'))
  );
  goal.id = titleId;
  header.append(goal, tag);
  const owner = ownerText(plan);
  if (owner !== null) {
    header.append(
      el('span', 'jp-gitpilot-muted jp-gitpilot-plan-owner', owner)
    );
  }
  return { node, header };
}

/** One pending plan: goal, source, the plan rendering, Approve and Reject. */
export class PlanCard {
  readonly node: HTMLElement;
  private readonly buttons: HTMLElement;
  private readonly approveButton: HTMLButtonElement;
  private readonly rejectButton: HTMLButtonElement;
  private readonly state: HTMLElement;
  private consent: HTMLInputElement | null = null;
  private _decidedAt: number | null = null;

  constructor(
    readonly plan: IPlan,
    private readonly model: SandboxModel,
    private readonly onDecided: () => void = () => undefined
  ) {
    const source = badge(
      plan.source === AGENT_SOURCE ? trans.__('agent') : plan.source,
      'source'
    );
    const { node, header } = planCard(plan, 'pending', plan.plan_id, source);
    this.node = node;
    const meta = el(
      'div',
      'jp-gitpilot-muted jp-gitpilot-pending-meta',
      requesterText(plan.source)
    );

    this.approveButton = el(
      'button',
      'jp-mod-styled jp-mod-accept',
      trans.__('Approve')
    );
    this.approveButton.type = 'button';
    this.approveButton.setAttribute(
      'aria-label',
      trans.__('Approve: %1', escapeText(plan.goal))
    );
    this.approveButton.addEventListener('click', () => void this.approve());
    if (plan.blocked) {
      this.approveButton.disabled = true;
      this.approveButton.title =
        plan.blocked_reason || trans.__('A destructive pattern matched');
    }
    this.rejectButton = el(
      'button',
      'jp-mod-styled jp-mod-reject',
      trans.__('Reject')
    );
    this.rejectButton.type = 'button';
    this.rejectButton.setAttribute(
      'aria-label',
      trans.__('Reject: %1', escapeText(plan.goal))
    );
    this.rejectButton.addEventListener('click', () => void this.reject());
    this.buttons = el('div', 'jp-gitpilot-buttons');
    this.buttons.append(this.rejectButton, this.approveButton);

    // A high-severity warning: approving takes a deliberate act (this box), never Enter.
    if (!plan.blocked && isRisky(plan)) {
      this.node.classList.add('jp-mod-risky');
      const label = el('label', 'jp-gitpilot-consent');
      this.consent = el('input');
      this.consent.type = 'checkbox';
      this.consent.name = 'consent';
      label.append(
        this.consent,
        el(
          'span',
          '',
          trans.__(
            'I have read the high-severity warning and want to let it run anyway'
          )
        )
      );
      this.consent.addEventListener('change', () => this.busy(false));
      this.approveButton.addEventListener('keydown', event => {
        if (event.key === 'Enter') {
          event.preventDefault(); // Enter never approves a risky plan (a click or Space does)
        }
      });
      this.buttons.prepend(label);
      this.busy(false);
    }

    this.state = el('div', 'jp-gitpilot-pending-state');
    this.state.setAttribute('aria-live', 'polite');
    this.node.append(header, meta, renderPlan(plan), this.buttons, this.state);
  }

  /** True once approved or rejected here. */
  get decided(): boolean {
    return this._decidedAt !== null;
  }

  /** True once decided longer ago than `DECIDED_LINGER_MS` (a refresh then lets it go). */
  decidedBefore(now: number): boolean {
    return (
      this._decidedAt !== null && now - this._decidedAt >= DECIDED_LINGER_MS
    );
  }

  private busy(on: boolean): void {
    const unconsented = this.consent !== null && !this.consent.checked;
    this.approveButton.disabled = on || this.plan.blocked || unconsented;
    this.rejectButton.disabled = on;
  }

  private done(text: string, kind: 'approved' | 'rejected'): void {
    this._decidedAt = Date.now();
    this.buttons.remove();
    this.node.classList.add(`jp-mod-${kind}`);
    this.state.className = `jp-gitpilot-pending-state jp-mod-${kind}`;
    this.state.setAttribute('role', 'status');
    this.state.textContent = text;
    this.onDecided();
  }

  private fail(error: unknown): void {
    this.busy(false);
    this.state.className = 'jp-gitpilot-pending-state jp-gitpilot-error';
    this.state.setAttribute('role', 'alert');
    this.state.textContent =
      error instanceof Error ? error.message : String(error);
  }

  /** `POST approve`; the answer (with its token) is dropped unread. Nothing runs here. */
  async approve(): Promise<void> {
    if (this.decided || this.plan.blocked || this.approveButton.disabled) {
      return;
    }
    this.busy(true);
    try {
      await this.model.client.approve(this.plan.plan_id);
    } catch (error) {
      this.fail(error);
      return;
    }
    this.done(approvedText(this.plan), 'approved');
  }

  /** `POST reject`: the plan can never be approved afterwards. */
  async reject(): Promise<void> {
    if (this.decided) {
      return;
    }
    this.busy(true);
    try {
      await this.model.client.reject(this.plan.plan_id);
    } catch (error) {
      this.fail(error);
      return;
    }
    this.done(rejectedText(), 'rejected');
  }
}

/** A running plan's state in words: "Running for 12 s — approved by you", "Stopping…". */
export function runningStateText(run: IRunningPlan, now: number): string {
  if (run.state === 'stopping') {
    return trans.__('Stopping…');
  }
  const took = formatDuration(Math.max(0, now - run.started_at * 1000));
  return run.approved_by === AGENT_SOURCE
    ? trans.__('Running for %1 — the agent approved it itself.', took)
    : trans.__('Running for %1 — approved by a person.', took);
}

/** An approved plan whose run is under way: goal, state in words, the code, ■ Stop. */
export class RunningCard {
  readonly node: HTMLElement;
  private readonly stopButton: HTMLButtonElement;
  private readonly state: HTMLElement;
  private run: IRunningPlan;
  private stopping = false;

  constructor(
    run: IRunningPlan,
    private readonly model: SandboxModel,
    private readonly onStopped: () => void = () => undefined
  ) {
    this.run = run;
    const plan = run.plan;
    const tag = badge(trans.__('running'), 'running');
    const { node, header } = planCard(plan, 'running', run.run_id, tag);
    this.node = node;
    this.node.dataset.runId = run.run_id;

    this.state = el('div', 'jp-gitpilot-pending-state jp-mod-running');
    this.state.setAttribute('role', 'status');
    this.state.setAttribute('aria-live', 'polite');

    this.stopButton = el(
      'button',
      'jp-mod-styled jp-gitpilot-stop-button',
      trans.__('■ Stop')
    );
    this.stopButton.type = 'button';
    this.stopButton.setAttribute(
      'aria-label',
      trans.__('Stop: %1', escapeText(plan.goal))
    );
    this.stopButton.title = trans.__(
      'Stop this run (it is ended on the server)'
    );
    this.stopButton.addEventListener('click', () => void this.stop());
    const buttons = el('div', 'jp-gitpilot-buttons');
    buttons.append(this.stopButton);

    const code = el('details', 'jp-gitpilot-running-plan');
    code.append(el('summary', '', trans.__('What it runs')), renderPlan(plan));
    this.node.append(header, this.state, buttons, code);
    this.update(run);
  }

  /** The run id this card stops. */
  get runId(): string {
    return this.run.run_id;
  }

  /** Take the server's latest word on the run (its state, while it is listed). */
  update(run: IRunningPlan, now = Date.now()): void {
    this.run = run;
    const stopping = this.stopping || run.state === 'stopping';
    this.state.textContent = runningStateText(
      stopping ? { ...run, state: 'stopping' } : run,
      now
    );
    this.stopButton.disabled = stopping;
  }

  /** `DELETE runs/{run_id}`: the server kills the run; the card leaves when it is over. */
  async stop(): Promise<void> {
    if (this.stopping) {
      return;
    }
    this.stopping = true;
    this.update(this.run);
    try {
      await this.model.client.cancelRun(this.run.run_id);
    } catch (error) {
      if (error instanceof ResponseError && error.code === 'run_not_found') {
        this.state.textContent = trans.__('It had already ended.');
      } else {
        this.stopping = false;
        this.update(this.run);
        this.state.className = 'jp-gitpilot-pending-state jp-gitpilot-error';
        this.state.setAttribute('role', 'alert');
        this.state.textContent =
          error instanceof Error ? error.message : String(error);
        return;
      }
    }
    this.onStopped();
  }
}

/** The panel widget: `refresh()` fetches the list; it polls while attached and visible. */
export class PendingPlansPanel extends Widget {
  private readonly list = el('div', 'jp-gitpilot-pending-list');
  private readonly message = el('div', 'jp-gitpilot-message');
  private readonly empty = el(
    'p',
    'jp-gitpilot-muted',
    trans.__('No plans are waiting for your decision.')
  );
  private readonly cards = new Map<string, PlanCard>();
  private readonly runningList = el('div', 'jp-gitpilot-running-list');
  private readonly runningSection = el('div', 'jp-gitpilot-running-section');
  private readonly runningCards = new Map<string, RunningCard>();
  private readonly poller = new VisiblePoll(() => void this.refresh());

  constructor(private readonly model: SandboxModel) {
    super();
    this.id = 'gitpilot-sandbox-pending';
    this.title.label = trans.__('Pending Plans');
    this.title.caption = trans.__('Sandbox: plans waiting for your decision');
    this.title.closable = true;
    this.addClass('jp-gitpilot-panel');
    this.addClass('jp-gitpilot-pending');

    const body = el('div', 'jp-gitpilot-panel-body');
    const header = el('div', 'jp-gitpilot-header');
    const refresh = el('button', 'jp-mod-styled', trans.__('Refresh'));
    refresh.type = 'button';
    refresh.addEventListener('click', () => void this.refresh(true));
    header.append(el('h2', '', trans.__('Pending plans')), refresh);
    const help = el(
      'p',
      'jp-gitpilot-muted',
      trans.__(
        'Plans an agent made in ask mode wait here for your decision. Approve lets the agent run its plan; nothing runs in this panel. Rejected and expired plans leave.'
      )
    );
    this.message.setAttribute('aria-live', 'polite');
    this.list.setAttribute('role', 'list');
    this.list.setAttribute('aria-label', trans.__('Pending plans'));
    // Approved plans whose run is under way: apart, since they wait for no one.
    const runningTitle = el('h2', '', trans.__('Running now'));
    const runningHelp = el(
      'p',
      'jp-gitpilot-muted',
      trans.__(
        'Approved plans an agent is running now. Stop ends the run on the server; a plan leaves when its run ends.'
      )
    );
    this.runningList.setAttribute('role', 'list');
    this.runningList.setAttribute('aria-label', trans.__('Running now'));
    this.runningSection.append(runningTitle, runningHelp, this.runningList);
    this.runningSection.hidden = true;
    body.append(
      header,
      help,
      this.message,
      this.empty,
      this.list,
      this.runningSection
    );
    this.node.appendChild(body);
  }

  /** The cards shown, in order. */
  get shown(): PlanCard[] {
    return Array.from(this.cards.values());
  }

  /** The running cards shown, in order. */
  get running(): RunningCard[] {
    return Array.from(this.runningCards.values());
  }

  /**
   * Ask the server for pending plans and update the cards in place (focus stays where it is).
   * Plans the server no longer lists (rejected, approved, expired) leave; a card decided
   * here stays `DECIDED_LINGER_MS` first (or until a manual refresh) so its outcome can be read.
   * Runs of approved plans show under "Running now" while the server lists them.
   */
  async refresh(clearDecided = false): Promise<void> {
    let plans: IPlan[];
    let running: IRunningPlan[];
    try {
      ({ plans, running } = await this.model.client.planListing());
    } catch (error) {
      setMessage(
        this.message,
        error instanceof Error ? error.message : String(error),
        true
      );
      return;
    }
    setMessage(this.message, '', false);
    this.model.setPlans(plans);
    const ids = new Set(plans.map(plan => plan.plan_id));
    const now = Date.now();
    for (const [id, card] of this.cards) {
      const gone = !ids.has(id) || card.decided;
      if (gone && (!card.decided || clearDecided || card.decidedBefore(now))) {
        card.node.remove();
        this.cards.delete(id);
      }
    }
    for (const plan of plans) {
      if (!this.cards.has(plan.plan_id)) {
        const card = new PlanCard(plan, this.model, () => {
          void this.refreshCount();
          // Let the decided card go once its outcome has been on screen for a while.
          window.setTimeout(() => void this.refresh(), DECIDED_LINGER_MS + 100);
        });
        card.node.setAttribute('role', 'listitem');
        this.cards.set(plan.plan_id, card);
        this.list.appendChild(card.node);
      }
    }
    this.empty.hidden = this.cards.size > 0;
    this.showRunning(running);
  }

  private showRunning(running: IRunningPlan[]): void {
    const now = Date.now();
    // A run that ended (or was stopped) leaves.
    syncRows(
      this.runningCards,
      running,
      run => run.run_id,
      this.runningList,
      run => {
        const card = new RunningCard(run, this.model, () => {
          // Stopped: look again soon, so the card leaves once the run has ended.
          window.setTimeout(() => void this.refresh(), 1000);
        });
        card.node.setAttribute('role', 'listitem');
        return card;
      },
      (card, run) => card.update(run, now)
    );
    this.runningSection.hidden = this.runningCards.size === 0;
  }

  private async refreshCount(): Promise<void> {
    const plans = await this.model.client.plans().catch(() => null);
    if (plans) {
      this.model.setPlans(plans);
    }
  }

  /** Poll every `seconds` while the page is visible (0 stops). */
  poll(seconds: number): void {
    this.poller.start(seconds);
  }

  protected onAfterAttach(): void {
    this.poll(POLL_SECONDS);
    void this.refresh();
  }

  protected onBeforeDetach(): void {
    this.poll(0);
  }

  dispose(): void {
    this.poll(0);
    super.dispose();
  }
}
