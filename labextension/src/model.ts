/**
 * The live sandbox status shared by the status bar item and the settings panel.
 */

import { ISignal, Signal } from '@lumino/signaling';

import type { SandboxClient } from './request';
import type { IStatus } from './types';

/** Holds the last `GET status` answer, refreshed periodically and after every change. */
export class SandboxModel {
  private _status: IStatus | null = null;
  private _error: string | null = null;
  private _timer: number | undefined;
  private readonly _changed = new Signal<this, void>(this);

  constructor(readonly client: SandboxClient) {}

  /** The last status, or null before the first answer. */
  get status(): IStatus | null {
    return this._status;
  }

  /** Why the last refresh failed, or null. */
  get error(): string | null {
    return this._error;
  }

  /** Emitted whenever the status or the error changes. */
  get changed(): ISignal<this, void> {
    return this._changed;
  }

  /** Ask the server now. */
  async refresh(): Promise<void> {
    try {
      this.set(await this.client.status());
    } catch (error) {
      this._error = error instanceof Error ? error.message : String(error);
      this._changed.emit();
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
    window.clearInterval(this._timer);
    this._timer = undefined;
    if (seconds > 0) {
      this._timer = window.setInterval(() => {
        if (document.visibilityState !== 'hidden') {
          void this.refresh();
        }
      }, seconds * 1000);
    }
  }

  /** Stop polling. */
  dispose(): void {
    this.poll(0);
    Signal.clearData(this);
  }
}
