/**
 * The live sandbox status shared by the status bar item and the settings panel.
 */

import { ISignal, Signal } from '@lumino/signaling';

import { VisiblePoll } from './poll';
import type { SandboxClient } from './request';
import type { IPlan, IStatus } from './types';

/** The `source` of plans an agent made in `ask` mode: they wait for a person elsewhere. */
export const AGENT_SOURCE = 'agent';

/**
 * Tells which plans of a list were not in the list seen before, so each agent plan
 * is announced once (a plan decided and gone is forgotten).
 */
export class NewPlansDetector {
  private seen = new Set<string>();

  /** The plans in `plans` not seen in the previous list. */
  observe(plans: readonly IPlan[]): IPlan[] {
    const fresh = plans.filter(plan => !this.seen.has(plan.plan_id));
    this.seen = new Set(plans.map(plan => plan.plan_id));
    return fresh;
  }
}

/** Holds the last `GET status` answer, refreshed periodically and after every change. */
export class SandboxModel {
  private _status: IStatus | null = null;
  private _error: string | null = null;
  private _waiting = 0;
  private readonly _poll = new VisiblePoll(() => void this.refresh());
  private readonly _changed = new Signal<this, void>(this);
  private readonly _newPlans = new Signal<this, IPlan[]>(this);
  private readonly _detector = new NewPlansDetector();

  constructor(readonly client: SandboxClient) {}

  /** The last status, or null before the first answer. */
  get status(): IStatus | null {
    return this._status;
  }

  /** Why the last refresh failed, or null. */
  get error(): string | null {
    return this._error;
  }

  /** How many plans wait for approval (what Pending Plans lists; 0 when unknown). */
  get waiting(): number {
    return this._waiting;
  }

  /** Emitted whenever the status or the error changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Emitted with the plans waiting for a person that no list had shown before. */
  get newPlans(): ISignal<this, IPlan[]> {
    return this._newPlans;
  }

  /** Ask the server now (status, and how many agent plans wait). */
  async refresh(): Promise<void> {
    const plans = this.client.plans().catch(() => null);
    try {
      const status = await this.client.status();
      this.countWaiting(await plans);
      this.set(status);
    } catch (error) {
      await plans;
      this._error = error instanceof Error ? error.message : String(error);
      this._changed.emit();
    }
  }

  /** Take a plan list answered by another call (the Pending Plans panel's poll). */
  setPlans(plans: IPlan[]): void {
    const before = this._waiting;
    this.countWaiting(plans);
    if (this._waiting !== before) {
      this._changed.emit();
    }
  }

  private countWaiting(plans: IPlan[] | null): void {
    // The server lists only what waits for someone else's decision (an agent's plans in
    // ask mode, never blocked ones): the panel shows that list, the status bar counts it.
    if (plans !== null) {
      this._waiting = plans.length;
      const fresh = this._detector.observe(plans);
      if (fresh.length) {
        this._newPlans.emit(fresh);
      }
    }
  }

  /** Take a status answered by another call (e.g. `PUT config`). */
  set(status: IStatus): void {
    this._status = status;
    this._error = null;
    this._changed.emit();
  }

  /** Refresh every `seconds` while the page is visible (0 stops). */
  poll(seconds: number): void {
    this._poll.start(seconds);
  }

  /** Stop polling. */
  dispose(): void {
    this._poll.stop();
    Signal.clearData(this);
  }
}
